// The local API server's watch: a chunked stream of events from the object store's history, as
// JSON lines (or Table rows for kubectl get --watch).
#include <httplib.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "localcluster/apiserver/api_server.h"
#include "localcluster/apiserver/request_reply.h"
#include "localcluster/apiserver/table.h"

namespace cohort::local {

using json = nlohmann::json;

namespace {

// A BOOKMARK event at `resource_version` (a Table without rows when the watch is of Tables);
// `initial_events_end`: the one that ends a watch-list's initial events.
json Bookmark(const ResourceType& type, const std::string& resource_version, bool table,
              bool initial_events_end) {
  json metadata = {{"resourceVersion", resource_version}};
  if (initial_events_end) metadata["annotations"] = {{"k8s.io/initial-events-end", "true"}};
  json marker = {{"kind", type.kind}, {"apiVersion", type.GroupVersion()}, {"metadata", metadata}};
  if (table) {
    marker = {{"kind", "Table"},
              {"apiVersion", "meta.k8s.io/v1"},
              {"metadata", metadata},
              {"columnDefinitions", json::array()},
              {"rows", json::array()}};
  }
  return {{"type", "BOOKMARK"}, {"object", marker}};
}

}  // namespace

void ApiServer::Watch(const ResourceType& type, const std::string& ns, const std::string& name,
                      const Selector& labels, const Selector& fields, const httplib::Request& req,
                      httplib::Response& res) {
  int64_t timeout_seconds;
  if (!absl::SimpleAtoi(req.get_param_value("timeoutSeconds"), &timeout_seconds))
    timeout_seconds = 1800;
  bool bookmarks = req.get_param_value("allowWatchBookmarks") == "true";
  // kubectl get -w asks for Tables, as for its first list: then each event's object is a Table of
  // one row, the column definitions in the first event only (the client keeps them).
  bool table = absl::StrContains(req.get_header_value("Accept"), "as=Table");
  std::string rv = req.get_param_value("resourceVersion");
  struct State {
    int64_t after = 0;
    bool started = false;
    bool columns_sent = false;
    absl::Time deadline;
    absl::Time last_sent;
  };
  auto state = std::make_shared<State>();
  state->deadline = clock_->Now() + absl::Seconds(timeout_seconds);
  state->last_sent = clock_->Now();
  auto event = [this, type, table, state](const std::string& event_type,
                                          const json& object) -> json {
    if (!table) return {{"type", event_type}, {"object", object}};
    json rows =
        ToTable(type, {object}, clock_->Now(), object["metadata"].value("resourceVersion", ""));
    if (state->columns_sent) rows["columnDefinitions"] = json::array();
    state->columns_sent = true;
    return {{"type", event_type}, {"object", rows}};
  };
  std::vector<std::string> initial;
  // A watch-list (client-go's reflectors and Helm's --wait send sendInitialEvents=true): the
  // current state as ADDED events, then a BOOKMARK annotated k8s.io/initial-events-end, then the
  // changes after it.
  const bool initial_events = req.get_param_value("sendInitialEvents") == "true";
  if (rv.empty() || rv == "0" || initial_events) {
    // From now, starting with the current state as ADDED events.
    json list = store_.List(type, ns, labels, fields);
    for (const json& o : list["items"]) {
      if (name.empty() || o["metadata"].value("name", "") == name)
        initial.push_back(event("ADDED", o).dump() + "\n");
    }
    const std::string listed = list["metadata"]["resourceVersion"].get<std::string>();
    state->after = std::stoll(listed);
    if (initial_events) initial.push_back(Bookmark(type, listed, false, true).dump() + "\n");
  } else if (!absl::SimpleAtoi(rv, &state->after)) {
    Reply(res, absl::FailedPreconditionError(
                   absl::StrCat("resourceVersion '", rv, "' is not a number")));
    return;
  }
  // Not plain "application/json": httplib would gzip the stream for clients that accept it (Go's
  // do), and the compressor holds events back until the stream ends.
  res.set_chunked_content_provider(
      "application/json;stream=watch",
      [this, type, ns, name, labels, fields, bookmarks, table, state, event,
       initial = std::move(initial)](size_t, httplib::DataSink& sink) {
        auto send = [&](const json& event) {
          std::string line = event.dump() + "\n";
          state->last_sent = clock_->Now();
          return sink.write(line.data(), line.size());
        };
        if (!state->started) {
          state->started = true;
          for (const std::string& line : initial) {
            if (!sink.write(line.data(), line.size())) return false;
          }
        }
        if (stopping_ || clock_->Now() >= state->deadline) {
          sink.done();
          return true;
        }
        absl::StatusOr<std::vector<ObjectStore::WatchEvent>> events = store_.WaitForEvents(
            type, ns, &state->after, std::min(state->deadline - clock_->Now(), absl::Seconds(1)));
        if (!events.ok()) {
          send({{"type", "ERROR"}, {"object", StatusObject(events.status())}});
          sink.done();
          return true;
        }
        for (const ObjectStore::WatchEvent& e : *events) {
          if (!name.empty() && (*e.object)["metadata"].value("name", "") != name) continue;
          if (!labels.Matches(*e.object) || !fields.Matches(*e.object)) continue;
          if (!send(event(e.type, *e.object))) return false;
        }
        if (bookmarks && clock_->Now() - state->last_sent > absl::Seconds(5) &&
            !send(Bookmark(type, absl::StrCat(state->after), table, false))) {
          return false;
        }
        return sink.is_writable();
      });
}

}  // namespace cohort::local
