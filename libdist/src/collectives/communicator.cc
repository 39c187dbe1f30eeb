#include <algorithm>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/env.h"
#include "common/log.h"
#include "coordination/client/agent.h"
#include "dist/collectives.h"
#include "libdist/src/collectives/backend_plan.h"
#include "libdist/src/collectives/communicator_impl.h"
#include "libdist/src/collectives/flight_recorder.h"
#include "libdist/src/collectives/hybrid_backend.h"
#include "libdist/src/collectives/locality.h"
#include "libdist/src/collectives/nccl_api.h"
#include "libdist/src/collectives/nccl_backend.h"
#include "libdist/src/collectives/progress_reporter.h"
#include "libdist/src/collectives/shm_backend.h"
#include "libdist/src/collectives/shm_segments.h"
#include "libdist/src/collectives/tcp_backend.h"
#include "libdist/src/collectives/timeout_diagnosis.h"

namespace dist {
namespace internal {
namespace {

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
  return absl::InvalidArgumentError(
      absl::StrCat(variable, "='", value, "' is not one of ", absl::StrJoin(names, ", ")));
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

// Sets this rank's value under `<rank>` in `store` and waits for every rank's. DeadlineExceeded
// names the processes that never published.
absl::StatusOr<std::vector<std::string>> ExchangeAll(Store store, int rank,
                                                     const std::string& value,
                                                     const RankNames& names, absl::Time deadline,
                                                     const std::string& what) {
  const int size = static_cast<int>(names.processes.size());
  if (absl::Status set = store.Set(absl::StrCat(rank), value); !set.ok()) return set;
  std::vector<std::string> values(size);
  for (int r = 0; r < size; ++r) {
    if (r == rank) {
      values[r] = value;
      continue;
    }
    absl::StatusOr<std::string> v = store.Get(absl::StrCat(r), deadline);
    if (absl::IsDeadlineExceeded(v.status())) {
      std::vector<int> missing;
      for (int q = r; q < size; ++q) {
        if (!store.TryGet(absl::StrCat(q)).ok()) missing.push_back(q);
      }
      return absl::DeadlineExceededError(
          absl::StrCat(names.List(missing), " did not ", what,
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

}  // namespace

// What this rank set up before the exchange, for the backends the plan picks.
struct LocalResources {
  std::optional<SegmentServer> segment_server;
  std::optional<SharedSegment> segment;
  std::optional<TcpListener> listener;
};

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
    absl::StatusOr<HostTransport> t = ParseChoice<HostTransport>(env::kHostTransport, *v,
                                                                 {{"auto", HostTransport::kAuto},
                                                                  {"shm", HostTransport::kShm},
                                                                  {"tcp", HostTransport::kTcp}});
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
    JobHandle job, ResolvedCommunicatorOptions options, std::string name, Store store,
    std::string progress_id, std::vector<int> processes) {
  std::unique_ptr<CommunicatorImpl> c(new CommunicatorImpl());
  c->job_ = std::move(job);
  c->options_ = options;
  c->name_ = std::move(name);
  c->store_ = std::move(store);
  c->progress_id_ = std::move(progress_id);
  c->names_.processes = std::move(processes);
  const int size = c->size();
  c->rank_ = static_cast<int>(
      std::find(c->names_.processes.begin(), c->names_.processes.end(), c->job_.process_id) -
      c->names_.processes.begin());
  const int rank = c->rank_;
  const absl::Time deadline = absl::Now() + options.init_timeout;

  // 1. What this rank can offer.
  PeerInfo mine;
  mine.locality = LocalityKey();
  mine.transport = HostTransportName(options.host_transport);
  mine.backend = BackendName(options.backend);
  const NcclApi* nccl_api = options.nccl_api;
  if (options.backend == Backend::kHost) {
    mine.nccl = "not asked for";
  } else if (nccl_api == nullptr) {
    absl::StatusOr<const NcclApi*> api = LoadNccl();
    if (api.ok()) {
      nccl_api = *api;
    } else {
      mine.nccl = std::string(api.status().message());
    }
  }
  LocalResources resources;
  const bool want_host = options.backend != Backend::kNccl;
  if (want_host && options.host_transport != HostTransport::kTcp && size > 1) {
    absl::StatusOr<SegmentServer> server = SegmentServer::Start();
    absl::StatusOr<SharedSegment> seg = server.ok()
                                            ? SharedSegment::Create(ShmBackend::SegmentBytes())
                                            : absl::StatusOr<SharedSegment>(server.status());
    if (server.ok() && seg.ok()) {
      resources.segment_server = std::move(*server);
      resources.segment = std::move(*seg);
      mine.shm = resources.segment_server->name();
    } else if (options.host_transport == HostTransport::kShm) {
      return seg.status();
    }
  }
  if (want_host && options.host_transport != HostTransport::kShm && size > 1) {
    absl::StatusOr<TcpListener> l =
        TcpListener::Listen(TcpHost(options.tcp_host, c->job_.coordinator_address));
    if (!l.ok()) return l.status();
    resources.listener = std::move(*l);
    mine.tcp = resources.listener->address();
  }

  // 2. Every rank's offer: one store round.
  absl::StatusOr<std::vector<std::string>> encoded =
      ExchangeAll(c->store_.WithPrefix("peer"), rank, mine.Encode(), c->names_, deadline,
                  absl::StrCat("create communicator '", c->name_, "'"));
  if (!encoded.ok()) return encoded.status();
  std::vector<PeerInfo> peers;
  for (const std::string& e : *encoded) peers.push_back(PeerInfo::Decode(e));

  // 3. Every rank decides alike from the same offers.
  absl::StatusOr<BackendPlan> plan = PlanBackends(peers, rank, c->name_, c->names_);
  if (!plan.ok()) return plan.status();

  // 4. The backends the plan names, then 5. the job's hooks.
  if (absl::Status s = c->AssembleBackends(*plan, peers, resources, nccl_api, deadline); !s.ok()) {
    return s;
  }
  c->AttachToJob();
  return c;
}

absl::Status CommunicatorImpl::AssembleBackends(const BackendPlan& plan,
                                                const std::vector<PeerInfo>& peers,
                                                LocalResources& resources, const NcclApi* nccl_api,
                                                absl::Time deadline) {
  const int size = this->size();
  std::vector<std::string> servers(size);
  for (int r : plan.local) servers[r] = peers[r].shm;
  switch (plan.host) {
    case BackendPlan::Host::kNone:
      break;
    case BackendPlan::Host::kSelf: {
      absl::StatusOr<SharedSegment> seg = SharedSegment::Create(ShmBackend::SegmentBytes());
      if (!seg.ok()) return seg.status();
      std::vector<SharedSegment> segs;
      segs.push_back(std::move(*seg));
      host_ = std::make_unique<ShmBackend>(0, names_, std::move(segs));
      break;
    }
    case BackendPlan::Host::kShm: {
      absl::StatusOr<std::vector<SharedSegment>> segs =
          ExchangeSegments(rank_, plan.local, servers, *resources.segment_server,
                           std::move(*resources.segment), names_, deadline);
      if (!segs.ok()) return segs.status();
      host_ = std::make_unique<ShmBackend>(rank_, names_, std::move(*segs));
      break;
    }
    case BackendPlan::Host::kTcp:
    case BackendPlan::Host::kHybrid: {
      std::vector<std::string> addresses(size);
      for (int r = 0; r < size; ++r) addresses[r] = peers[r].tcp;
      const uint64_t nonce = std::hash<std::string>()(store_.prefix());
      absl::StatusOr<std::unique_ptr<TcpBackend>> tcp = TcpBackend::Connect(
          rank_, names_, std::move(*resources.listener), addresses, nonce, deadline);
      if (!tcp.ok()) return tcp.status();
      if (plan.host == BackendPlan::Host::kTcp) {
        host_ = std::move(*tcp);
        break;
      }
      absl::StatusOr<std::vector<SharedSegment>> all_segs =
          ExchangeSegments(rank_, plan.local, servers, *resources.segment_server,
                           std::move(*resources.segment), names_, deadline);
      if (!all_segs.ok()) return all_segs.status();
      std::vector<SharedSegment> segs;
      for (int r : plan.local) segs.push_back(std::move((*all_segs)[r]));
      host_ = HybridBackend::Assemble(rank_, plan.local, plan.rail, std::move(segs), names_,
                                      std::move(*tcp));
      break;
    }
  }
  transport_ = plan.transport;
  if (plan.nccl) {
    absl::StatusOr<std::unique_ptr<NcclBackend>> nccl = NcclBackend::Create(
        nccl_api, rank_, names_,
        options_.cuda_device >= 0 ? options_.cuda_device
                                  : NcclBackend::DefaultDevice(nccl_api, job_.local_process_id),
        store_, deadline);
    if (!nccl.ok()) return nccl.status();
    nccl_ = std::move(*nccl);
  }
  return absl::OkStatus();
}

void CommunicatorImpl::AttachToJob() {
  {
    absl::MutexLock lock(&anchor_->mu);
    anchor_->impl = this;
  }
  // Abort on a job failure, before the program's own handler runs.
  std::shared_ptr<CommunicatorAnchor> anchor = anchor_;
  absl::StatusOr<FailureHandlers::Id> hook =
      AddFailureHandler(absl::StrCat("abort communicator '", name_, "'"), kAbortHookBound,
                        [anchor](const PeerFailure& failure) {
                          absl::ReaderMutexLock lock(&anchor->mu);
                          if (anchor->impl) anchor->impl->Abort(JobAborted(failure));
                        });
  if (hook.ok()) failure_hook_ = *hook;
  // The watchdog's view of this communicator, reported with its heartbeats.
  std::shared_ptr<CollectiveProgress> progress = progress_;
  const std::string id = progress_id_;
  reporter_id_ = ProgressReporter::Get().Add(job_, [progress, id] {
    cohort::coordination::CollectiveProgress p;
    p.communicator = id;
    absl::MutexLock lock(&progress->mu);
    p.last_started = progress->last_started;
    p.last_completed = progress->last_completed;
    if (!progress->in_flight.empty()) {
      const auto& [seq, oldest] = *progress->in_flight.begin();
      p.pending = oldest.sig.ToString();
      p.pending_signature = SignatureHash(oldest.sig);
      p.pending_for = absl::Now() - oldest.since;
    }
    return p;
  });
  if (std::optional<PeerFailure> failed = JobFailure()) Abort(JobAborted(*failed));
}

CommunicatorImpl::~CommunicatorImpl() {
  {
    absl::MutexLock lock(&anchor_->mu);
    anchor_->impl = nullptr;
  }
  if (reporter_id_) ProgressReporter::Get().Remove(*reporter_id_);
  if (failure_hook_) RemoveFailureHandler(*failure_hook_);
  bool busy;
  {
    absl::MutexLock lock(&mu_);
    busy = !in_flight_.empty();
    if (busy && aborted_.ok()) {
      aborted_ = absl::AbortedError("the communicator was destroyed with this call in flight");
    }
    stopping_ = true;
  }
  // A job that failed, or calls in flight: the backends abort instead of shutting down with
  // their peers.
  if (busy || JobFailure().has_value()) {
    if (host_) host_->Abort();
    if (nccl_) nccl_->Abort();
  }
  // Before the calls in flight end: once a Wait() returns, the program may free the buffers,
  // and no kernel of an aborted call may write to them after that.
  if (busy && nccl_) nccl_->FailAndAbort();
  if (worker_.joinable()) worker_.join();
  std::deque<std::shared_ptr<WorkState>> left;
  {
    absl::MutexLock lock(&mu_);
    left.swap(in_flight_);
    host_queue_.clear();
  }
  for (const std::shared_ptr<WorkState>& work : left) {
    absl::Status refusal;
    {
      absl::ReaderMutexLock lock(&mu_);
      refusal = Refusal(work->call.sig);
    }
    Finish(*work, refusal);
  }
}

std::string CommunicatorImpl::Describe() const {
  std::string s = absl::StrCat(name_, ": ", size(), size() == 1 ? " rank" : " ranks");
  if (host_) absl::StrAppend(&s, ", host backend over ", transport_);
  if (nccl_) absl::StrAppend(&s, ", ", nccl_->Describe(), " for device buffers");
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
    return absl::InvalidArgumentError(
        absl::StrCat(CollectiveKindName(kind), ": the receive buffer is null"));
  }
  if (has_data && send == nullptr && !(kind == CollectiveKind::kBroadcast && rank_ != root)) {
    return absl::InvalidArgumentError(
        absl::StrCat(CollectiveKindName(kind), ": the send buffer is null"));
  }
  if (kind == CollectiveKind::kBroadcast && (root < 0 || root >= size())) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast: root ", root,
                                                   " is not a rank of communicator '", name_,
                                                   "' (0..", size() - 1, ")"));
  }
  return absl::OkStatus();
}

bool CommunicatorImpl::UseNccl(const void* send, const void* recv) const {
  if (!nccl_) return false;
  if (!host_) return true;
  const NcclApi* api = options_.nccl_api ? options_.nccl_api : *LoadNccl();
  return NcclBackend::IsDevicePointer(api, recv) || NcclBackend::IsDevicePointer(api, send);
}

absl::Status CommunicatorImpl::Refusal(const OpSignature& sig) const {
  if (!aborted_.ok()) {
    return absl::Status(aborted_.code(), absl::StrCat(sig.ToString(), " on communicator '", name_,
                                                      "' aborted: ", aborted_.message()));
  }
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "communicator '", name_, "' cannot be used after an earlier failure: ", broken_.message()));
  }
  return absl::OkStatus();
}

void CommunicatorImpl::NcclFailedLocked(absl::Status failure, const OpSignature& sig,
                                        absl::Time since) {
  if (nccl_failed_) return;
  nccl_failed_ = true;
  nccl_failure_message_ = std::string(failure.message());
  nccl_failure_ = std::move(failure);
  nccl_failure_sig_ = sig;
  nccl_failure_since_ = since;
  StartWorkerLocked();
}

bool CommunicatorImpl::PollNccl(bool watch_thread) {
  std::vector<std::shared_ptr<WorkState>> ended;
  bool pending = false;
  {
    absl::MutexLock lock(&mu_);
    if (nccl_failed_) return false;  // The worker ends them.
    if (watch_thread) nccl_->PrepareWatchThread();
    std::optional<absl::Status> failure;
    const WorkState* failed = nullptr;
    for (const std::shared_ptr<WorkState>& w : in_flight_) {
      if (!w->on_nccl) continue;
      CudaEvent event;
      {
        absl::MutexLock wlock(&w->mu);
        event = w->event;
      }
      if (event == nullptr) {  // Still being enqueued.
        pending = true;
        continue;
      }
      absl::StatusOr<bool> done = nccl_->Query(event);
      if (!done.ok()) {
        failure =
            absl::InternalError(absl::StrCat(w->call.sig.ToString(), " failed on ",
                                             names_.Name(rank_), ": ", done.status().message()));
        failed = w.get();
        break;
      }
      if (*done) {
        ended.push_back(w);
        continue;
      }
      pending = true;
      // Each call's own deadline (calls may have different timeouts).
      if (absl::Now() >= w->call.deadline) {
        failure = absl::DeadlineExceededError(absl::StrCat(
            w->call.sig.ToString(), " did not complete in time on ", names_.Name(rank_)));
        failed = w.get();
        break;
      }
      if (failed == nullptr) failed = w.get();  // The oldest pending, for a failure below.
    }
    // The calls that ended leave the list now, so a failure handled meanwhile never touches
    // them; Finish below ends them OK.
    for (const std::shared_ptr<WorkState>& w : ended) {
      in_flight_.erase(std::find(in_flight_.begin(), in_flight_.end(), w));
    }
    if (!failure && pending) {  // Health matters to the calls still in flight only.
      if (absl::Status health = nccl_->Health(); !health.ok()) failure = health;
    }
    if (failure) {
      NcclFailedLocked(std::move(*failure), failed ? failed->call.sig : OpSignature{},
                       failed ? failed->enqueued : absl::Now());
      pending = false;
    }
  }
  for (const std::shared_ptr<WorkState>& w : ended) Finish(*w, absl::OkStatus());
  return pending;
}

absl::Status CommunicatorImpl::StreamWait(WorkState& work, CudaStream stream) {
  absl::MutexLock lock(&work.mu);
  if (work.done) return work.status;
  return nccl_->StreamWait(stream, work.event);
}

void CommunicatorImpl::HandleNcclFailure(absl::Status failure) {
  nccl_->FailAndAbort();  // First: no kernel of an aborted call writes to a buffer after this.
  OpSignature sig;
  absl::Time since;
  {
    absl::MutexLock lock(&mu_);
    sig = nccl_failure_sig_;
    since = nccl_failure_since_;
  }
  // Explained (who held it up), recorded as the communicator's first failure, reported to the
  // job when the ranks no longer agree; then every NCCL call in flight ends with it.
  const absl::Status first = Fail(sig, std::move(failure), absl::Now() - since);
  std::vector<std::shared_ptr<WorkState>> works;
  {
    absl::MutexLock lock(&mu_);
    for (const std::shared_ptr<WorkState>& w : in_flight_) {
      if (w->on_nccl) works.push_back(w);
    }
  }
  for (const std::shared_ptr<WorkState>& w : works) {
    Finish(*w,
           w->call.sig.seq == sig.seq
               ? first
               : absl::Status(first.code(), absl::StrCat(w->call.sig.ToString(),
                                                         " did not complete: ", first.message())));
  }
}

std::optional<std::string> CommunicatorImpl::Diagnose(const OpSignature& sig,
                                                      absl::Duration waited) {
  // Every rank's entry into this call reaches the service within `settle`: a report interval
  // plus the heartbeat that carries it, or, sooner, the prompt report of a collective in flight
  // for kPromptProgressAfter (Agent::ReportProgress). After a short wait, let the latest reports
  // arrive. After a wait of at least twice that, a rank that entered within the last `settle` is
  // itself behind by more than `settle`: naming it as the one that held the call up is right, and
  // not waiting for its report names a stopped rank within the timeout + 1 s (docs/faults.md),
  // whatever the heartbeat timeout. A live program reports every report interval, so one whose
  // report was `stale_after` old when its agent last heartbeat has stopped; a timeout shorter
  // than that waits until then.
  ProgressReporter::Get().PushNow();
  const absl::Duration heartbeat = cohort::coordination::HeartbeatInterval(job_.heartbeat_timeout);
  const absl::Duration settle = ProgressReporter::kInterval +
                                std::min(heartbeat, cohort::coordination::kPromptProgressAfter +
                                                        ProgressReporter::kInterval) +
                                absl::Milliseconds(200);
  const absl::Duration stale_after = 3 * ProgressReporter::kInterval;
  absl::Duration wait =
      std::clamp(stale_after + absl::Milliseconds(200) - waited, absl::ZeroDuration(), settle);
  if (waited < 2 * settle) wait = settle;
  absl::SleepFor(wait);
  absl::StatusOr<std::vector<cohort::coordination::TaskProgress>> table = store_.JobProgress();
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
  context.stale_after = stale_after;
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
    status = absl::Status(aborted.code(), absl::StrCat(sig.ToString(), " on communicator '", name_,
                                                       "' aborted: ", aborted.message()));
  } else if (absl::IsDeadlineExceeded(status)) {
    // The watchdog: name who held the call up from the cross-rank picture, when it can.
    std::optional<std::string> diagnosis = Diagnose(sig, waited);
    status = absl::DeadlineExceededError(absl::StrCat(
        "communicator '", name_, "': ", sig.ToString(), " timed out after ",
        absl::FormatDuration(absl::Trunc(waited, absl::Milliseconds(100))), " on ",
        names_.Name(rank_), ": ", diagnosis ? *diagnosis : std::string(status.message())));
  } else {
    status =
        absl::Status(status.code(), absl::StrCat("communicator '", name_, "': ", status.message()));
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
    store_.ReportError(cohort::coordination::FailureCause::kCollectiveTimeout, status.message())
        .IgnoreError();
  }
  if (JobFailure().has_value() || absl::IsDeadlineExceeded(status) ||
      absl::IsFailedPrecondition(status)) {
    // Fate sharing first (by default the process exits 75 here), also for the failure this
    // process just reported.
    AwaitFailureHandled(kFailureHandlerWait);
  }
  return status;
}

absl::StatusOr<std::unique_ptr<CommunicatorImpl>> CommunicatorImpl::Split(int color, int key) {
  const std::string split = absl::StrCat("split", splits_++);
  absl::StatusOr<std::vector<std::string>> all = ExchangeAll(
      store_.WithPrefix(split + "/members"), rank_, absl::StrCat(color, ",", key), names_,
      absl::Now() + options_.init_timeout, absl::StrCat("split communicator '", name_, "'"));
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
  const std::string child = absl::StrCat(split, "/color", color);
  return Build(job_, options_, absl::StrCat(name_, ".", color), store_.WithPrefix(child),
               absl::StrCat(progress_id_, "/", child), std::move(processes));
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
  const std::string id = absl::StrCat(key, "#", internal::NextInstance(key));
  internal::Store store =
      internal::Store(job->client)
          .WithPrefix(absl::StrCat("collectives/attempt", job->restart_attempt, "/", id));
  std::vector<int> processes(job->num_processes);
  for (int p = 0; p < job->num_processes; ++p) processes[p] = p;
  absl::StatusOr<std::unique_ptr<internal::CommunicatorImpl>> impl =
      internal::CommunicatorImpl::Build(*job, *resolved, name, std::move(store), id,
                                        std::move(processes));
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

// Each collective twice: blocking, and asynchronous (a Work).
#define COHORT_COLLECTIVE(Name, Kind, Params, Args)                   \
  absl::Status Communicator::Name Params {                            \
    return impl_->Run(internal::CollectiveKind::Kind, Args, options); \
  }                                                                   \
  absl::StatusOr<Work> Communicator::Name##Async Params {             \
    absl::StatusOr<std::shared_ptr<internal::WorkState>> work =       \
        impl_->Submit(internal::CollectiveKind::Kind, Args, options); \
    if (!work.ok()) return work.status();                             \
    return internal::WorkAccess::Wrap(std::move(*work));              \
  }
#define COHORT_PARAMS(...) (__VA_ARGS__)
#define COHORT_ARGS(...) __VA_ARGS__

COHORT_COLLECTIVE(AllReduce, kAllReduce,
                  COHORT_PARAMS(const void* send, void* recv, size_t count, DataType type,
                                ReduceOp op, const CallOptions& options),
                  COHORT_ARGS(send, recv, count, type, op, -1))
COHORT_COLLECTIVE(AllGather, kAllGather,
                  COHORT_PARAMS(const void* send, void* recv, size_t send_count, DataType type,
                                const CallOptions& options),
                  COHORT_ARGS(send, recv, send_count, type, ReduceOp::kSum, -1))
COHORT_COLLECTIVE(ReduceScatter, kReduceScatter,
                  COHORT_PARAMS(const void* send, void* recv, size_t recv_count, DataType type,
                                ReduceOp op, const CallOptions& options),
                  COHORT_ARGS(send, recv, recv_count, type, op, -1))
COHORT_COLLECTIVE(Broadcast, kBroadcast,
                  COHORT_PARAMS(const void* send, void* recv, size_t count, DataType type, int root,
                                const CallOptions& options),
                  COHORT_ARGS(send, recv, count, type, ReduceOp::kSum, root))
COHORT_COLLECTIVE(AllToAll, kAllToAll,
                  COHORT_PARAMS(const void* send, void* recv, size_t count, DataType type,
                                const CallOptions& options),
                  COHORT_ARGS(send, recv, count, type, ReduceOp::kSum, -1))
COHORT_COLLECTIVE(Barrier, kBarrier, COHORT_PARAMS(const CallOptions& options),
                  COHORT_ARGS(nullptr, nullptr, 0, DataType::kFloat32, ReduceOp::kSum, -1))

#undef COHORT_COLLECTIVE
#undef COHORT_PARAMS
#undef COHORT_ARGS

}  // namespace dist
