// Package session is mspd's session manager: it creates, loads and lists
// sessions, makes commands exactly-once through a durable ledger, appends
// events to each session's log (minting cursors and source ranges), fans
// them out to subscribers, serves resume, subscribe and paging, and runs
// each session's turn queue. It knows nothing of WebSockets or JSON-RPC
// framing (a connection is a Subscriber), of how a turn talks to a model
// (a TurnRunner runs it), of how the store keeps a log (store.Store) or of
// how nodes reach one another (a Cluster, nil on one node).
//
// # Lifecycle
//
// A session is loaded into memory on first use (Manager.load) and
// unloaded when idle (Manager.sweep); its log stays in the store. A loaded
// session is in one phase (phase.go), which changes only through
// session.enter, checked against phaseMoves:
//
//	loading ──▶ live ──session/delete──▶ erasing ──done──▶ erased
//	   │         ▲                          │                 ▲
//	   │         └───────── whole (unmark) ─┤                 │
//	   │                                    │ partway         │
//	   │                                    ▼                 │
//	   └───────── row says erasing ──▶ halfErased ─sent again─┘
//
//	live ◀──▶ unsettled   (a follower told of a failed deletion, until
//	                       it reads the row: whole, or erasing or gone)
//
// loading: being read, seen by nobody. live: takes commands. unsettled: a
// follower told that a deletion failed reads the row before serving
// again, since the erasure may have got part of the way. erasing: a
// session/delete stops its turn and erases it; nothing more is written.
// halfErased: an erasure failed partway (or the store cannot tell): only a
// deletion sent again reaches it, and nothing is written to it, so no
// cursor of it is handed out twice; its row says so
// (store.Session.Erasing), on every node and after a restart. erased:
// gone from the store; session.farewell tells late subscribers. The
// drawing leaves out moves of a follower, whose live or unsettled session
// becomes erased when it hears the news and halfErased when it finds the
// row erasing or gone, and a few more: an erased session that a second
// deletion could not confirm gone is halfErased again, a half-erased one
// found whole is live. phaseMoves lists every move with its reason.
//
// Beside its phase a session holds facts the phase does not decide:
// whether a worker runs its queue and whether the scheduler gave up on a
// log that refuses its writes (working, broken: a broken session still
// takes commands and may be deleted), whether its active turn waits for
// the worker its admission launched (launched), and whether a follower's
// state lags its log (stale).
//
// # Approvals
//
// A tool call that needs a person's consent is recorded with its
// approval/requested in the commit of its item/started; approval/decide
// records approval/resolved. Every node keeps a session's approvals in a
// table (approvals.go) folded from those records — by appendLocked on the
// leader, ingest on a follower, fold at a load — so a pending approval
// survives a restart and a takeover, and the tools approved for the
// session with it. Each approval's state moves once, from requested to
// the resolution named for its decision. A subscriber that presents
// approvals (an Asker) is asked for each one as it opens, and for every
// pending one when it subscribes. A running turn waits through approver,
// which the scheduler gives it; its resumption names the calls whose
// approval was pending when it was taken up (turn.Resumption.Unapproved):
// they never ran. A host shutting down stops a turn waiting for a person
// as it stops itself (Manager.StopWaiting, session.park): the approval
// stays pending.
//
// # Locking
//
// Locks are taken in this order, and never the other way:
//
//  1. a commandId's ledger slot (ledger.lock), held through its admission;
//  2. session.erasing, held through an erasure, so that two run one after
//     the other (Manager.sweep only tries it, under the locks below);
//  3. Manager.mu, which guards the loaded sessions and their pins: never
//     taken under a session's mu (a follower that hears of an erasure
//     forgets the session on a goroutine of its own);
//  4. session.mu, which serialises a session's appends and fan-out, so
//     subscribers see events in cursor order: held across its commits, and
//     while it calls a Subscriber's Deliver (which must not block) and the
//     Cluster's Publish, Follow, Release and the stop Follow returned,
//     none of which may wait for a Follow callback (session.ingest takes
//     session.mu). pauseLocked lets go of it while it waits out a failed
//     write;
//  5. listeners.mu (the list news), and ledger.mu (the slots in flight),
//     innermost.
//
// Fields read without session.mu are atomics (session.spans,
// session.queued) or set before read publishes the session (its id, key,
// owner and manager).
//
// # Cluster
//
// On a cluster several managers share one store. Each loaded session has
// a role on its node (phase.go): the leader, which holds its lease, alone
// writes its log and runs its turns; every other node that loads it
// follows it. A follower serves reads, session/resume, view/subscribe and
// view/page: it applies the leader's published events as they come
// (session.ingest: durable ones move its head, ephemeral ones its
// sub-position), reads from the store the records it missed, reports the
// ephemeral events it missed to its readers as a view/gap, and reads its
// row again before serving the state it lags (freshLocked). A command
// that changes the session is forwarded to the leader and its answer
// relayed unchanged (Manager.forward); the leader runs it as its
// principal and never forwards it again. Exactly-once holds: the ledger
// is in the shared store, and only the leader admits.
//
// Takeover: a node claims a session nobody leads when a command for it
// arrives, and takes over the busy sessions whose leader's lease lapsed
// or was let go on shutdown (adoptOrphans) every AdoptInterval and at
// once when the Cluster, a Departures, tells of a node that left. Leading
// (Manager.lead) stops following, reads the session again, catches its
// subscribers up on what was appended since, becomes the writer and
// resumes the turn the last leader left running as a new attempt, as after
// a restart. Writes are fenced on the log's head, so a leader paused past
// its lease cannot overwrite what the next one wrote; when the Cluster, a
// Lapses, tells it that it joined again, it claims again what it leads
// and gives up, as a follower, what another node took (Manager.reclaim). A deletion runs on
// the leader; its followers hear session/deleteCompleted and become erased
// or, when it failed, unsettled.
package session
