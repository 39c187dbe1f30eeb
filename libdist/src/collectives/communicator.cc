#include <map>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/env.h"
#include "common/log.h"
#include "coordination/client/await.h"
#include "dist/collectives.h"
#include "libdist/src/collectives/communicator_impl.h"
#include "libdist/src/collectives/flight_recorder.h"
#include "libdist/src/collectives/locality.h"
#include "libdist/src/collectives/hybrid_backend.h"
#include "libdist/src/collectives/nccl_api.h"
#include "libdist/src/collectives/nccl_backend.h"
#include "libdist/src/collectives/shm_backend.h"
#include "libdist/src/collectives/tcp_backend.h"
#include "libdist/src/collectives/progress_reporter.h"
#include "libdist/src/collectives/shm_segments.h"
#include "libdist/src/collectives/timeout_diagnosis.h"
#include "coordination/client/agent.h"

namespace dist {
namespace internal {
namespace {

using cohort::coordination::Await;

// How long a blocked collective waits for the program's peer-failure handler before returning
// Aborted (the default handler exits at once; a custom one may take its time).
constexpr absl::Duration kFailureHandlerWait = absl::Milliseconds(500);
// How long a call whose connection broke waits for the job failure that explains it.
constexpr absl::Duration kTransportFailureGrace = absl::Milliseconds(800);
// How long the failure hook may take to abort one communicator.
constexpr absl::Duration kAbortHookBound = absl::Seconds(2);

template <typename Enum>
absl::StatusOr<Enum> ParseChoice(const char* variable, const std::string& value,
                                 std::initializer_list<std::pair<const char*, Enum>> choices) {
  std::vector<std::string> names;
  for (const auto& [name, e] : choices) {
    if (value == name) return e;
    names.push_back(name);
  }
  return absl::InvalidArgumentError(absl::StrCat(variable, "='", value, "' is not one of ",
                                                 absl::StrJoin(names, ", ")));
}

// A key-value store path component from a user-given name.
std::string KeySafe(const std::string& name) {
  return absl::StrReplaceAll(name, {{"/", "_"}, {" ", "_"}});
}

// Each process numbers the communicators it creates under a name; creation is collective and
// ordered, so every rank arrives at the same number.
int NextInstance(const std::string& key) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* counts = new std::map<std::string, int>();
  absl::MutexLock lock(&mu);
  return (*counts)[key]++;
}

// One rank's announcement to the others.
struct PeerInfo {
  std::string locality;
  std::string transport;  // What it asked for: auto|shm|tcp.
  std::string shm;        // Its segment server, or "" when it has none.
  std::string tcp;        // Its TCP address, or "".
  std::string backend;    // What it asked for: auto|nccl|host.
  std::string nccl;       // "" when NCCL is usable there, else why not.

  std::string Encode() const {
    return absl::StrJoin({locality, transport, shm, tcp, backend, nccl}, "\n");
  }
  static PeerInfo Decode(const std::string& s) {
    std::vector<std::string> f = absl::StrSplit(s, absl::MaxSplits('\n', 5));
    f.resize(6);
    return PeerInfo{f[0], f[1], f[2], f[3], f[4], f[5]};
  }
};

// Sets this rank's value under `scope/<rank>` and waits for every rank's. DeadlineExceeded names
// the processes that never published.
absl::StatusOr<std::vector<std::string>> ExchangeAll(const JobHandle& job,
                                                     const std::string& scope, int rank,
                                                     const std::string& value,
                                                     const RankNames& names,
                                                     absl::Time deadline,
                                                     const std::string& what) {
  const int size = static_cast<int>(names.processes.size());
  absl::Status set = Await<absl::Status>([&](auto done) {
    job.client->InsertKeyValue(absl::StrCat(scope, "/", rank), value, true, std::move(done));
  });
  if (!set.ok()) return set;
  std::vector<std::string> values(size);
  for (int r = 0; r < size; ++r) {
    if (r == rank) {
      values[r] = value;
      continue;
    }
    const absl::Duration left = std::max(absl::ZeroDuration(), deadline - absl::Now());
    absl::StatusOr<std::string> v = Await<absl::StatusOr<std::string>>([&](auto done) {
      job.client->GetKeyValue(absl::StrCat(scope, "/", r), left, std::move(done));
    });
    if (absl::IsDeadlineExceeded(v.status())) {
      std::vector<int> missing;
      for (int q = r; q < size; ++q) {
        absl::StatusOr<std::string> t = Await<absl::StatusOr<std::string>>([&](auto done) {
          job.client->TryGetKeyValue(absl::StrCat(scope, "/", q), std::move(done));
        });
        if (!t.ok()) missing.push_back(q);
      }
      return absl::DeadlineExceededError(absl::StrCat(
          names.List(missing), " did not ", what,
          " in time; every process must create its communicators in the same order"));
    }
    if (!v.ok()) return v.status();
    values[r] = *v;
  }
  return values;
}

absl::Status JobAborted(const PeerFailure& failure) {
  return absl::AbortedError(absl::StrCat("the job failed: ", failure.message));
}

// The ranks by host (their locality key), hosts in order of their lowest rank.
struct HostGroups {
  std::vector<std::vector<int>> hosts;
  std::vector<int> host_of;  // By rank.
  bool uniform = true;       // The same number of ranks on every host.
};
HostGroups GroupByHost(const std::vector<PeerInfo>& peers) {
  HostGroups g;
  std::map<std::string, int> index;
  for (int r = 0; r < static_cast<int>(peers.size()); ++r) {
    // A rank without a shared-memory socket is a host of its own.
    const std::string key = peers[r].shm.empty() ? absl::StrCat("rank-", r) : peers[r].locality;
    auto [it, inserted] = index.emplace(key, static_cast<int>(g.hosts.size()));
    if (inserted) g.hosts.emplace_back();
    g.hosts[it->second].push_back(r);
    g.host_of.push_back(it->second);
  }
  for (const auto& h : g.hosts) g.uniform &= h.size() == g.hosts[0].size();
  return g;
}

}  // namespace

absl::StatusOr<ResolvedCommunicatorOptions> ResolveCommunicatorOptions(
    const CommunicatorOptions& options, absl::Duration job_init_timeout) {
  namespace env = cohort::env;
  ResolvedCommunicatorOptions r;
  if (options.backend) {
    r.backend = *options.backend;
  } else if (auto v = env::Get(env::kCollectives)) {
    absl::StatusOr<Backend> b = ParseChoice<Backend>(
        env::kCollectives, *v,
        {{"auto", Backend::kAuto}, {"nccl", Backend::kNccl}, {"host", Backend::kHost}});
    if (!b.ok()) return b.status();
    r.backend = *b;
  }
  if (options.host_transport) {
    r.host_transport = *options.host_transport;
  } else if (auto v = env::Get(env::kHostTransport)) {
    absl::StatusOr<HostTransport> t = ParseChoice<HostTransport>(
        env::kHostTransport, *v,
        {{"auto", HostTransport::kAuto}, {"shm", HostTransport::kShm}, {"tcp", HostTransport::kTcp}});
    if (!t.ok()) return t.status();
    r.host_transport = *t;
  }
  if (options.timeout) {
    r.timeout = *options.timeout;
  } else {
    absl::StatusOr<std::optional<absl::Duration>> t = env::GetDuration(env::kCollectiveTimeout);
    if (!t.ok()) return t.status();
    if (t->has_value()) r.timeout = **t;
  }
  if (r.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the collective timeout must be positive");
  }
  r.init_timeout = options.init_timeout.value_or(job_init_timeout);
  if (options.tcp_host) {
    r.tcp_host = *options.tcp_host;
  } else if (auto v = env::Get(env::kCollectivesHost)) {
    r.tcp_host = *v;
  }
  r.cuda_device = options.cuda_device.value_or(-1);
  return r;
}

absl::StatusOr<std::unique_ptr<CommunicatorImpl>> CommunicatorImpl::Build(
    JobHandle job, ResolvedCommunicatorOptions options, std::string name, std::string scope,
    std::vector<int> processes) {
  std::unique_ptr<CommunicatorImpl> c(new CommunicatorImpl());
  c->job_ = std::move(job);
  c->options_ = options;
  c->name_ = std::move(name);
  c->scope_ = std::move(scope);
  c->names_.processes = std::move(processes);
  const int size = c->size();
  c->rank_ = static_cast<int>(
      std::find(c->names_.processes.begin(), c->names_.processes.end(), c->job_.process_id) -
      c->names_.processes.begin());
  const int rank = c->rank_;
  const absl::Time deadline = absl::Now() + options.init_timeout;
  const RankNames& names = c->names_;

  // What this rank can offer.
  PeerInfo mine;
  mine.locality = LocalityKey();
  mine.transport = HostTransportName(options.host_transport);
  mine.backend = BackendName(options.backend);
  const NcclApi* nccl_api = nullptr;
  if (options.backend != Backend::kHost) {
    absl::StatusOr<const NcclApi*> api = LoadNccl();
    if (api.ok()) {
      nccl_api = *api;
    } else {
      mine.nccl = std::string(api.status().message());
    }
  } else {
    mine.nccl = "not asked for";
  }
  std::optional<SegmentServer> segment_server;
  std::optional<SharedSegment> segment;
  std::optional<TcpListener> listener;
  const bool want_host = options.backend != Backend::kNccl;
  if (want_host && options.host_transport != HostTransport::kTcp && size > 1) {
    absl::StatusOr<SegmentServer> server = SegmentServer::Start();
    absl::StatusOr<SharedSegment> seg =
        server.ok() ? SharedSegment::Create(ShmBackend::SegmentBytes())
                    : absl::StatusOr<SharedSegment>(server.status());
    if (server.ok() && seg.ok()) {
      segment_server = std::move(*server);
      segment = std::move(*seg);
      mine.shm = segment_server->name();
    } else if (options.host_transport == HostTransport::kShm) {
      return seg.status();
    }
  }
  if (want_host && options.host_transport != HostTransport::kShm && size > 1) {
    absl::StatusOr<TcpListener> l =
        TcpListener::Listen(TcpHost(options.tcp_host, c->job_.coordinator_address));
    if (!l.ok()) return l.status();
    listener = std::move(*l);
    mine.tcp = listener->address();
  }

  absl::StatusOr<std::vector<std::string>> encoded = ExchangeAll(
      c->job_, c->scope_ + "/peer", rank, mine.Encode(), names, deadline,
      absl::StrCat("create communicator '", c->name_, "'"));
  if (!encoded.ok()) return encoded.status();
  std::vector<PeerInfo> peers;
  for (const std::string& e : *encoded) peers.push_back(PeerInfo::Decode(e));

  // Every rank decides alike from the same announcements.
  for (int r = 0; r < size; ++r) {
    if (peers[r].backend != mine.backend || peers[r].transport != mine.transport) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the ranks of communicator '", c->name_, "' asked for different backends: ",
          names.Name(r), " for COHORT_COLLECTIVES=", peers[r].backend,
          " COHORT_HOST_TRANSPORT=", peers[r].transport, ", ", names.Name(rank), " for ",
          mine.backend, " / ", mine.transport, "; set them alike on every process"));
    }
  }
  std::vector<int> without_nccl;
  for (int r = 0; r < size; ++r) {
    if (!peers[r].nccl.empty()) without_nccl.push_back(r);
  }
  const bool use_nccl = options.backend != Backend::kHost && without_nccl.empty();
  if (options.backend == Backend::kNccl && !use_nccl) {
    const int first = without_nccl.front();
    return absl::UnavailableError(absl::StrCat(
        "COHORT_COLLECTIVES=nccl, but ", names.List(without_nccl), " cannot run NCCL (",
        names.Name(first), ": ", peers[first].nccl, ")"));
  }

  if (want_host) {
    bool all_local = true;
    for (int r = 0; r < size; ++r) all_local &= peers[r].locality == mine.locality && !peers[r].shm.empty();
    if (size == 1) {
      std::vector<SharedSegment> segs;
      absl::StatusOr<SharedSegment> seg = SharedSegment::Create(ShmBackend::SegmentBytes());
      if (!seg.ok()) return seg.status();
      segs.push_back(std::move(*seg));
      c->host_ = std::make_unique<ShmBackend>(0, names, std::move(segs));
      c->transport_ = "shared memory";
    } else if (options.host_transport != HostTransport::kTcp && all_local) {
      std::vector<int> local(size);
      std::vector<std::string> servers(size);
      for (int r = 0; r < size; ++r) {
        local[r] = r;
        servers[r] = peers[r].shm;
      }
      absl::StatusOr<std::vector<SharedSegment>> segs = ExchangeSegments(
          rank, local, servers, *segment_server, std::move(*segment), names, deadline);
      if (!segs.ok()) return segs.status();
      c->host_ = std::make_unique<ShmBackend>(rank, names, std::move(*segs));
      c->transport_ = "shared memory";
    } else if (options.host_transport == HostTransport::kShm) {
      std::vector<int> remote;
      for (int r = 0; r < size; ++r) {
        if (peers[r].locality != mine.locality || peers[r].shm.empty()) remote.push_back(r);
      }
      return absl::UnavailableError(absl::StrCat(
          "COHORT_HOST_TRANSPORT=shm, but ", names.List(remote),
          " cannot share memory with ", names.Name(rank),
          " (another host or network namespace); use auto or tcp"));
    } else {
      std::vector<std::string> addresses(size);
      for (int r = 0; r < size; ++r) addresses[r] = peers[r].tcp;
      const uint64_t nonce = std::hash<std::string>()(c->scope_);
      absl::StatusOr<std::unique_ptr<TcpBackend>> tcp = TcpBackend::Connect(
          rank, names, std::move(*listener), addresses, nonce, deadline);
      if (!tcp.ok()) return tcp.status();
      c->host_ = std::move(*tcp);
      c->transport_ = "TCP";
      // Several ranks on each host: shared memory within hosts, TCP between them.
      const HostGroups groups = GroupByHost(peers);
      if (options.host_transport == HostTransport::kAuto && groups.uniform &&
          groups.hosts.size() > 1 && groups.hosts[0].size() > 1) {
        const int host = groups.host_of[rank];
        const std::vector<int>& local = groups.hosts[host];
        const int local_rank = static_cast<int>(
            std::find(local.begin(), local.end(), rank) - local.begin());
        std::vector<std::string> servers(size);
        for (int r : local) servers[r] = peers[r].shm;
        absl::StatusOr<std::vector<SharedSegment>> all_segs = ExchangeSegments(
            rank, local, servers, *segment_server, std::move(*segment), names, deadline);
        if (!all_segs.ok()) return all_segs.status();
        std::vector<SharedSegment> segs;
        RankNames local_names;
        for (int r : local) {
          segs.push_back(std::move((*all_segs)[r]));
          local_names.processes.push_back(names.processes[r]);
        }
        std::vector<int> rail;
        for (const std::vector<int>& h : groups.hosts) rail.push_back(h[local_rank]);
        auto* flat = static_cast<TcpBackend*>(c->host_.get());
        std::unique_ptr<CollectiveBackend> rail_backend = TcpBackend::Subset(*flat, rail);
        c->host_ = std::make_unique<HybridBackend>(
            local_rank, static_cast<int>(local.size()), static_cast<int>(groups.hosts.size()),
            size, std::make_unique<ShmBackend>(local_rank, local_names, std::move(segs)),
            std::move(rail_backend), std::move(c->host_));
        c->transport_ = absl::StrCat("shared memory within each of ", groups.hosts.size(),
                                     " hosts (", local.size(), " ranks each) and TCP between them");
      }
    }
  }
  if (use_nccl) {
    const std::string id_key = absl::StrCat(c->scope_, "/nccl/id");
    const std::string joined = absl::StrCat(c->scope_, "/nccl/joined");
    JobHandle j = c->job_;
    NcclBackend::Rendezvous rdv;
    rdv.publish_id = [j, id_key](const NcclUniqueId& id) {
      return Await<absl::Status>([&](auto done) {
        j.client->InsertKeyValue(id_key, std::string(id.internal, sizeof(id.internal)), true,
                                 std::move(done));
      });
    };
    rdv.fetch_id = [j, id_key](absl::Time dl) -> absl::StatusOr<NcclUniqueId> {
      absl::StatusOr<std::string> v = Await<absl::StatusOr<std::string>>([&](auto done) {
        j.client->GetKeyValue(id_key, std::max(absl::ZeroDuration(), dl - absl::Now()),
                              std::move(done));
      });
      if (!v.ok()) return v.status();
      NcclUniqueId id{};
      std::memcpy(id.internal, v->data(), std::min(v->size(), sizeof(id.internal)));
      return id;
    };
    rdv.mark_joined = [j, joined, rank] {
      // Best effort: a rank whose mark is missing is only named among the missing ones later.
      Await<absl::Status>([&](auto done) {
        j.client->InsertKeyValue(absl::StrCat(joined, "/", rank), "1", true, std::move(done));
      }).IgnoreError();
    };
    rdv.missing_ranks = [j, joined, size] {
      std::vector<int> missing;
      for (int r = 0; r < size; ++r) {
        absl::StatusOr<std::string> v = Await<absl::StatusOr<std::string>>([&](auto done) {
          j.client->TryGetKeyValue(absl::StrCat(joined, "/", r), std::move(done));
        });
        if (!v.ok()) missing.push_back(r);
      }
      return missing;
    };
    absl::StatusOr<std::unique_ptr<NcclBackend>> nccl = NcclBackend::Create(
        nccl_api, rank, names,
        options.cuda_device >= 0 ? options.cuda_device
                                 : NcclBackend::DefaultDevice(nccl_api, c->job_.local_process_id),
        std::move(rdv), deadline);
    if (!nccl.ok()) return nccl.status();
    c->nccl_ = std::move(*nccl);
  }

  // Abort on a job failure, before the program's own handler runs.
  c->hook_target_ = std::make_shared<HookTarget>();
  {
    absl::MutexLock lock(&c->hook_target_->mu);
    c->hook_target_->impl = c.get();
  }
  std::shared_ptr<HookTarget> target = c->hook_target_;
  absl::StatusOr<FailureHandlers::Id> hook = AddFailureHandler(
      absl::StrCat("abort communicator '", c->name_, "'"), kAbortHookBound,
      [target](const PeerFailure& failure) {
        absl::MutexLock lock(&target->mu);
        if (target->impl) target->impl->Abort(JobAborted(failure));
      });
  if (hook.ok()) c->failure_hook_ = *hook;
  // The watchdog's view of this communicator, reported with its heartbeats.
  c->progress_id_ = c->scope_.substr(c->scope_.find('/', std::string("collectives/").size()) + 1);
  std::shared_ptr<CollectiveProgress> progress = c->progress_;
  const std::string id = c->progress_id_;
  c->reporter_id_ = ProgressReporter::Get().Add(c->job_, [progress, id] {
    cohort::coordination::CollectiveProgress p;
    p.communicator = id;
    absl::MutexLock lock(&progress->mu);
    p.last_started = progress->last_started;
    p.last_completed = progress->last_completed;
    if (progress->pending) {
      p.pending = progress->pending->ToString();
      p.pending_signature = SignatureHash(*progress->pending);
      p.pending_for = absl::Now() - progress->pending_since;
    }
    return p;
  });
  if (std::optional<PeerFailure> failed = JobFailure()) c->Abort(JobAborted(*failed));
  return c;
}

CommunicatorImpl::~CommunicatorImpl() {
  if (reporter_id_) ProgressReporter::Get().Remove(*reporter_id_);
  if (failure_hook_) RemoveFailureHandler(*failure_hook_);
  if (hook_target_) {
    absl::MutexLock lock(&hook_target_->mu);
    hook_target_->impl = nullptr;
  }
  // A job that failed: the backends abort instead of shutting down with their peers.
  if (JobFailure().has_value()) {
    if (host_) host_->Abort();
    if (nccl_) nccl_->Abort();
  }
}

std::string CommunicatorImpl::Describe() const {
  std::string s = absl::StrCat(name_, ": ", size(), size() == 1 ? " rank" : " ranks");
  if (host_) absl::StrAppend(&s, ", host backend over ", transport_);
  if (nccl_) absl::StrAppend(&s, host_ ? ", " : ", ", nccl_->Describe(), " for device buffers");
  return s;
}

void CommunicatorImpl::Abort(absl::Status reason) {
  {
    absl::MutexLock lock(&mu_);
    if (aborted_.ok()) aborted_ = reason;
  }
  if (host_) host_->Abort();
  if (nccl_) nccl_->Abort();
}

absl::Status CommunicatorImpl::Validate(CollectiveKind kind, const void* send, void* recv,
                                        size_t count, int root) const {
  const bool has_data = kind != CollectiveKind::kBarrier && count > 0;
  if (has_data && recv == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(CollectiveKindName(kind),
                                                   ": the receive buffer is null"));
  }
  if (has_data && send == nullptr &&
      !(kind == CollectiveKind::kBroadcast && rank_ != root)) {
    return absl::InvalidArgumentError(absl::StrCat(CollectiveKindName(kind),
                                                   ": the send buffer is null"));
  }
  if (kind == CollectiveKind::kBroadcast && (root < 0 || root >= size())) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast: root ", root,
                                                   " is not a rank of communicator '", name_,
                                                   "' (0..", size() - 1, ")"));
  }
  return absl::OkStatus();
}

CollectiveBackend* CommunicatorImpl::BackendFor(const void* send, const void* recv) const {
  if (!nccl_) return host_.get();
  if (!host_) return nccl_.get();
  const NcclApi* api = *LoadNccl();
  return NcclBackend::IsDevicePointer(api, recv) || NcclBackend::IsDevicePointer(api, send)
             ? nccl_.get()
             : host_.get();
}

std::optional<std::string> CommunicatorImpl::Diagnose(const OpSignature& sig,
                                                      absl::Duration waited) {
  // Let every rank's latest progress reach the service: this rank's now, the others' within a
  // report interval plus a heartbeat interval.
  ProgressReporter::Get().PushNow();
  const absl::Duration heartbeat = cohort::coordination::HeartbeatInterval(job_.heartbeat_timeout);
  absl::SleepFor(ProgressReporter::kInterval + heartbeat + absl::Milliseconds(200));
  absl::StatusOr<std::vector<cohort::coordination::TaskProgress>> table =
      Await<absl::StatusOr<std::vector<cohort::coordination::TaskProgress>>>(
          [&](auto done) { job_.client->GetJobProgress(std::move(done)); });
  if (!table.ok()) {
    cohort::LogWarning("the collective watchdog could not read the job's progress: ",
                       table.status().message());
    return std::nullopt;
  }
  TimeoutContext context;
  context.communicator = progress_id_;
  context.sig = sig;
  context.rank = rank_;
  context.names = names_;
  context.waited = waited;
  context.stale_after = 2 * (ProgressReporter::kInterval + heartbeat) + absl::Seconds(1);
  return DiagnoseTimeout(context, *table);
}

absl::Status CommunicatorImpl::Fail(const OpSignature& sig, absl::Status status,
                                    absl::Duration waited) {
  absl::Status aborted;
  {
    absl::MutexLock lock(&mu_);
    if (absl::IsInternal(status)) {
      // A broken connection is usually a peer that died: the coordination service names it
      // within moments, and the failure hook aborts this communicator with that news.
      mu_.AwaitWithTimeout(absl::Condition(
                               +[](absl::Status* a) { return !a->ok(); }, &aborted_),
                           kTransportFailureGrace);
    }
    aborted = aborted_;
  }
  if (!aborted.ok()) {
    status = absl::Status(aborted.code(), absl::StrCat(sig.ToString(), " on communicator '",
                                                       name_, "' aborted: ", aborted.message()));
  } else if (absl::IsDeadlineExceeded(status)) {
    // The watchdog: name who held the call up from the cross-rank picture, when it can.
    std::optional<std::string> diagnosis = Diagnose(sig, waited);
    status = absl::DeadlineExceededError(absl::StrCat(
        "communicator '", name_, "': ", sig.ToString(), " timed out after ",
        absl::FormatDuration(absl::Trunc(waited, absl::Milliseconds(100))), " on ",
        names_.Name(rank_), ": ", diagnosis ? *diagnosis : std::string(status.message())));
  } else {
    status = absl::Status(status.code(), absl::StrCat("communicator '", name_, "': ",
                                                      status.message()));
  }
  {
    absl::MutexLock lock(&mu_);
    if (broken_.ok()) broken_ = status;
  }
  const std::string dump = FlightRecorder::Get().Dump(8);
  cohort::LogWarning(status.message(), "\n", dump);
  if (absl::IsDeadlineExceeded(status) || absl::IsFailedPrecondition(status)) {
    // The ranks no longer agree on what comes next: fail the job, naming what was seen.
    // Best effort: if the report does not get through, the job fails through this process's exit.
    Await<absl::Status>([&](auto done) {
      job_.client->ReportError(cohort::coordination::FailureCause::kCollectiveTimeout,
                               std::string(status.message()), std::move(done));
    }).IgnoreError();
  }
  if (JobFailure().has_value() || absl::IsDeadlineExceeded(status) ||
      absl::IsFailedPrecondition(status)) {
    // Fate sharing first (by default the process exits 75 here), also for the failure this
    // process just reported.
    AwaitFailureHandled(kFailureHandlerWait);
  }
  return status;
}

absl::Status CommunicatorImpl::Run(CollectiveKind kind, const void* send, void* recv,
                                   size_t count, DataType type, ReduceOp op, int root,
                                   const CallOptions& options) {
  if (absl::Status s = Validate(kind, send, recv, count, root); !s.ok()) return s;
  {
    absl::MutexLock lock(&mu_);
    if (!broken_.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "communicator '", name_, "' cannot be used after an earlier failure: ",
          broken_.message()));
    }
  }
  CollectiveCall call;
  call.sig.seq = next_seq_.fetch_add(1);
  call.sig.kind = kind;
  call.sig.type = type;
  call.sig.op = op;
  call.sig.root = kind == CollectiveKind::kBroadcast ? root : -1;
  call.sig.count = kind == CollectiveKind::kBarrier ? 0 : count;
  call.send = send;
  call.recv = recv;
  // One clock read per call (absl::Now() costs ~100 ns on some VMs: a tenth of a small op).
  const absl::Time started = absl::Now();
  call.deadline = started + options.timeout.value_or(options_.timeout);
  call.cuda_stream = options.cuda_stream;
  {
    absl::MutexLock lock(&progress_->mu);
    progress_->last_started = call.sig.seq;
    progress_->pending = call.sig;
    progress_->pending_since = started;
  }
  FlightRecorder& recorder = FlightRecorder::Get();
  const uint64_t entry = recorder.Start(name_, call.sig, started);
  absl::Status s = BackendFor(send, recv)->Run(call);
  if (s.ok()) {
    recorder.End(entry);
  } else {
    recorder.End(entry, std::string(s.message()), absl::Now());
  }
  {
    absl::MutexLock lock(&progress_->mu);
    progress_->pending.reset();
    if (s.ok()) progress_->last_completed = call.sig.seq;
  }
  if (s.ok() || absl::IsInvalidArgument(s)) return s;
  return Fail(call.sig, s, absl::Now() - started);
}

absl::StatusOr<std::unique_ptr<CommunicatorImpl>> CommunicatorImpl::Split(int color, int key) {
  const int k = splits_++;
  const std::string scope = absl::StrCat(scope_, "/split", k);
  absl::StatusOr<std::vector<std::string>> all =
      ExchangeAll(job_, scope + "/members", rank_, absl::StrCat(color, ",", key), names_,
                  absl::Now() + options_.init_timeout,
                  absl::StrCat("split communicator '", name_, "'"));
  if (!all.ok()) return all.status();
  if (color < 0) return std::unique_ptr<CommunicatorImpl>();
  std::vector<std::tuple<int, int, int>> members;  // (key, parent rank, process)
  for (int r = 0; r < size(); ++r) {
    std::pair<std::string, std::string> ck = absl::StrSplit((*all)[r], ',');
    int c = 0, kk = 0;
    if (!absl::SimpleAtoi(ck.first, &c) || !absl::SimpleAtoi(ck.second, &kk)) {
      return absl::InternalError("malformed split announcement");
    }
    if (c == color) members.emplace_back(kk, r, names_.processes[r]);
  }
  std::sort(members.begin(), members.end());
  std::vector<int> processes;
  for (const auto& m : members) processes.push_back(std::get<2>(m));
  return Build(job_, options_, absl::StrCat(name_, ".", color),
               absl::StrCat(scope, "/color", color), std::move(processes));
}

}  // namespace internal

// ---- dist::Communicator -------------------------------------------------------------------

Communicator::Communicator(std::unique_ptr<internal::CommunicatorImpl> impl)
    : impl_(std::move(impl)) {}

Communicator::~Communicator() = default;

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(
    const CommunicatorOptions& options) {
  absl::StatusOr<internal::JobHandle> job = internal::CurrentJob();
  if (!job.ok()) {
    return absl::FailedPreconditionError(
        "dist::Communicator::Create() needs dist::Initialize() first");
  }
  absl::StatusOr<internal::ResolvedCommunicatorOptions> resolved =
      internal::ResolveCommunicatorOptions(options, job->initialization_timeout);
  if (!resolved.ok()) return resolved.status();
  const std::string name = options.name.empty() ? "world" : options.name;
  const std::string key = internal::KeySafe(name);
  const std::string scope = absl::StrCat("collectives/attempt", job->restart_attempt, "/", key,
                                         "#", internal::NextInstance(key));
  std::vector<int> processes(job->num_processes);
  for (int p = 0; p < job->num_processes; ++p) processes[p] = p;
  absl::StatusOr<std::unique_ptr<internal::CommunicatorImpl>> impl =
      internal::CommunicatorImpl::Build(*job, *resolved, name, scope, std::move(processes));
  if (!impl.ok()) {
    return absl::Status(impl.status().code(),
                        absl::StrCat("cannot create communicator '", name, "' on process ",
                                     job->process_id, ": ", impl.status().message()));
  }
  return std::unique_ptr<Communicator>(new Communicator(std::move(*impl)));
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Split(int color, int key) {
  absl::StatusOr<std::unique_ptr<internal::CommunicatorImpl>> impl = impl_->Split(color, key);
  if (!impl.ok()) return impl.status();
  if (!*impl) return std::unique_ptr<Communicator>();
  return std::unique_ptr<Communicator>(new Communicator(std::move(*impl)));
}

int Communicator::rank() const { return impl_->rank(); }
int Communicator::size() const { return impl_->size(); }
const std::vector<int>& Communicator::processes() const { return impl_->processes(); }
Backend Communicator::backend() const { return impl_->backend(); }
std::string Communicator::Describe() const { return impl_->Describe(); }

void Communicator::Abort(absl::string_view reason) {
  impl_->Abort(absl::AbortedError(absl::StrCat("Abort() was called: ", reason)));
}

absl::Status Communicator::AllReduce(const void* send, void* recv, size_t count, DataType type,
                                     ReduceOp op, const CallOptions& options) {
  return impl_->Run(internal::CollectiveKind::kAllReduce, send, recv, count, type, op, -1,
                    options);
}

absl::Status Communicator::AllGather(const void* send, void* recv, size_t send_count,
                                     DataType type, const CallOptions& options) {
  return impl_->Run(internal::CollectiveKind::kAllGather, send, recv, send_count, type,
                    ReduceOp::kSum, -1, options);
}

absl::Status Communicator::ReduceScatter(const void* send, void* recv, size_t recv_count,
                                         DataType type, ReduceOp op,
                                         const CallOptions& options) {
  return impl_->Run(internal::CollectiveKind::kReduceScatter, send, recv, recv_count, type, op,
                    -1, options);
}

absl::Status Communicator::Broadcast(const void* send, void* recv, size_t count, DataType type,
                                     int root, const CallOptions& options) {
  return impl_->Run(internal::CollectiveKind::kBroadcast, send, recv, count, type,
                    ReduceOp::kSum, root, options);
}

absl::Status Communicator::AllToAll(const void* send, void* recv, size_t count, DataType type,
                                    const CallOptions& options) {
  return impl_->Run(internal::CollectiveKind::kAllToAll, send, recv, count, type,
                    ReduceOp::kSum, -1, options);
}

absl::Status Communicator::Barrier(const CallOptions& options) {
  return impl_->Run(internal::CollectiveKind::kBarrier, nullptr, nullptr, 0,
                    DataType::kFloat32, ReduceOp::kSum, -1, options);
}

}  // namespace dist
