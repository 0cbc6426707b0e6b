// Package bench is mspd's load benchmark, run by cmd/mspbench. It starts a
// real mspd process (the binary given, or ./cmd/mspd built for the run;
// its tests run their own binary as mspd, see internal/cli/clitest),
// drives it over real WebSocket connections from this process, reads the
// server's CPU time and resident memory from /proc, and sets every figure
// beside a baseline measured in the same run on the same machine:
// coder/websocket alone writing the same frames (a child process running
// ServeRaw), or plain SQLite inserts group-committed as store/sqlite does.
// It knows mspd from the outside: flags, the MSP wire and /metrics (plus
// the wire encoding of notifications, so that its clients can classify
// frames without decoding them, and mspd's cursor format to read a log's
// length). One scenario goes further: notice also runs a daemon
// (daemon.New) in the benchmark's own process on a recording clock, to
// time each retry notice from the moment it is fanned out to the moment a
// client reads it, to the nanosecond, beside the separate process's
// millisecond emittedAtMs.
//
// Scenarios: turns (N sessions × one turn: a 429, then K deltas; delivered
// deltas/s and server CPU a delta, at two operating points: answers paced
// as a person reads them, which the reader keeps up with, beside raw
// frames paced alike; and answers as fast as the provider streams, which
// the reader falls behind), notice (retry-notice latency at a steady turn rate and in a
// burst), idle (RSS per idle subscribed connection), resume (replaying a
// log of 10k events), append (durable events/s across 100 sessions, on
// SQLite and on one and three nodes on JetStream), store (the same
// appends through store.Store itself, two commits a turn as the session
// layer makes them, on store/sqlite and on store/jetstream with one and
// three replicas, beside plain SQLite; on JetStream, a node's lease
// upkeep at 1k–100k claimed sessions, and a principal's list and an
// adoption pass at up to a million stored sessions), cluster (the turns scenario on sessions led by one node of
// a JetStream cluster, read on that node and on another that follows it
// over core NATS, beside one SQLite node) and memory (the peak RSS of a
// fresh mspd per case over its idle RSS, on a history of 12 turns of 10 MB
// input: large session/read and view/page, connections that never read
// sending view/page, connections sending maximum-size frames) and gateway
// (not run by default: an open loop of turns at offered rates, each on a
// session of its own, against an OpenAI-compatible fake provider in this
// process that answers in 1.5 s, beside the same load sent straight to
// the fake; see gateway.go) and failover (not run by default: for 1, 100
// and 1,000 busy sessions led by one node of three on JetStream R3, each
// with a turn streaming from that fake, the node is killed; how long until
// each turn's resumed attempt is announced and streams on a client of
// another node, and whether every turn completes with exactly two
// provider requests; see failover.go). Clustered
// mspd nodes run as processes with embedded NATS servers (--store
// jetstream --nats-embedded), as e2e starts them, or with
// Config.NATSServer beside nats-server processes of their own, one a
// node, as production runs them.
//
//	rep, err := bench.Run(ctx, bench.Config{Scenarios: []string{"turns"}})
//	if err != nil {
//		return err
//	}
//	rep.WriteTable(os.Stdout)
//
// The binary running Run must call ServeRaw when started with RawServerArg:
// Run starts it so for the raw baseline.
package bench
