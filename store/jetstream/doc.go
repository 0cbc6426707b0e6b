// Package jetstream is mspd's store.Store on NATS JetStream, for several
// mspd nodes sharing one durable log. It owns the layout of its streams
// (one by default; see Streams) and the protocol of writing and reading
// them; it knows nothing of sessions,
// turns or who owns a session (the caller's lease decides which node
// writes; this package only makes sure two writers can never interleave).
// It passes store/storetest unchanged, on one server and on a three-node
// cluster with three replicas, and on three streams.
//
//	s, err := jetstream.Connect(ctx, "nats://a:4222,nats://b:4222", jetstream.Options{Replicas: 3})
//	...
//	h, _ := s.Head(ctx, id)
//	err = s.Commit(ctx, store.Batch{SessionID: id, Records: recs(h+1, ...), Session: row, Commands: cmds})
//	if errors.Is(err, store.ErrConflict) { /* another node wrote first: re-read, retry or give up */ }
//
// Open takes a jetstream.JetStream the caller already has; Connect dials a
// URL and owns the connection.
//
// # One stream
//
// A session's log, its row and the commandId ledger entries written with
// it all live in ONE stream (Options.Stream, default MSPD) under one
// subject prefix (Options.Subject, default mspd); with several streams
// (below), each stream holds its sessions so, under a prefix of its own:
//
//	mspd.log.<session>.<page>      a record; page = (seq-1)/32
//	mspd.row.<session>             the session row, rolled up (Nats-Rollup: sub) so only the last stays
//	mspd.own.<owner>.<session>     the row's entry in its owner's index, rolled up likewise
//	mspd.busy.<session>            the row's busy entry, rolled up; an idle one expires (below)
//	mspd.cmd.<command>.<session>   a ledger entry; "=" as session for a command of no session
//	mspd.meta.layout               the layout marker: the layout version, rolled up
//
// Ids become subject tokens: ids of ASCII letters, digits, '-' and '_'
// stand for themselves, anything else (and "") is "=" plus its base64url
// encoding, so no id reaches into another's subjects and "a" never matches
// "ab"; owners likewise. A record's payload is its method, length-prefixed, then its params,
// both returned byte for byte; its dense seq is the Mspd-Seq header. Rows
// carry Mspd-Owner, Mspd-Created, Mspd-Updated and Mspd-Busy headers and
// the state as payload; an index entry carries the same headers but the
// owner's, and no payload; a busy entry carries Mspd-Busy (1 or 0) alone;
// ledger entries carry Mspd-Created and the digest, IsError and
// response as payload.
//
// One stream rather than a stream plus KV buckets because a Commit must be
// atomic across all three, and JetStream's atomic batch publish (ADR-50,
// nats-server 2.12+, "Nats-Batch-Id") is atomic within one stream only.
// The ledger is not a KV bucket for the same reason; its entries are found
// by subject (last message on mspd.cmd.<command>.*), which is what a KV get
// does anyway.
//
// # Streams
//
// One stream takes a few thousand commits a second (docs/scaling.md):
// its leader applies every write in turn. Options.Streams (mspd's
// --jetstream-streams) spreads the sessions over N streams: stream 0 is
// MSPD on mspd.> as ever, so a deployment of one stream is stream 0
// unchanged; stream i > 0 is MSPD_<i> on mspd-<i>.> (a prefix of its own
// first token, so no two streams' subjects overlap). Each stream has
// everything above for its sessions: logs, rows, owner and busy indexes,
// search texts, ledger entries, and its own layout marker. A session
// lives in exactly one stream, so a Commit, all of one session, is still
// one atomic batch guarded as below; a batch of ledger entries alone (no
// session) goes to stream 0.
//
// Placement: a new session goes to stream fnv64a(id) mod N. Growing N
// moves nothing: stream 0's layout marker lists the counts the deployment
// has used, oldest first (Mspd-Streams: 1,4), and a session is looked for
// in its home under the current count, then under each earlier one (a get
// of its row, and of its log's head for a log without a row, in each),
// and belongs to its current home if none holds it. So only new sessions
// follow the new N, and with one count (a deployment that never grew)
// placement is the hash alone, with no lookup; after a growth a session's
// place costs up to two gets a generation, once: the Store remembers it
// (forgotten when it erases the session; a node that did not erase it
// would look in the old place for an id made again after its erasure,
// which mspd's random session ids never are). Nothing migrates: the older
// streams keep serving their sessions, and carry fewer writes as those
// end. Shrinking is refused at Open (ErrFewerStreams), before any stream
// is touched: the sessions of the streams left out would vanish.
//
// The marker of a deployment that has used more than one stream is
// layout 3 (the count list), so an mspd from before there were several
// refuses to open it rather than miss the sessions of the other streams;
// one that never used more than one keeps layout 2. Every node must run with the same N. To grow: restart every
// node with the new N. During a rolling restart the nodes still on the
// old count do not see the sessions the new nodes place in other streams
// (they answer them not found) until they restart; the new nodes see
// every session.
//
// What spans streams reads each at once and merges: Sessions and Search
// merge the owner's index of every stream, then read the page's rows
// from their own streams (so a page costs N index reads plus its rows);
// BusySessions merges every stream's busy index; Command asks every
// stream and PruneCommands reads every stream's ledger, deleting the
// oldest across them; DeleteSession erases the session in its stream and
// purges the ledger entries naming it in the others (those written in a
// batch of no session, in stream 0) before its row goes.
//
// The ledger across streams: a ledger entry is written, atomically, in
// its batch's stream, where the server guards that its id is absent.
// Another stream cannot carry that guard, so Commit first looks each id
// up in the other streams and refuses the batch (ErrConflict, nothing
// written) if one holds it: a commandId reused for a session of another
// stream conflicts as it does in one stream, and Command finds it
// wherever it is. The look-up is a read before the write, not a guard: two
// first admissions of one id racing, for sessions of two streams, both
// within that read's few milliseconds, could both land, each in its
// stream. The session layer never sends those: a node admits an id under
// that id's lock, and a commandId names one command of one session, whose
// retries go to that session, in its one stream. Should it happen,
// Command answers with the entry of the lowest stream.
//
// # Commit
//
// A Commit is one atomic batch: every record, the row with its index and
// busy entries and every ledger entry become messages of one batch (Nats-Batch-Id, Nats-Batch-Sequence,
// Nats-Batch-Commit on the last), which the server applies entirely or not
// at all, and which readers never see half of (the server isolates reads
// from batch commits). A lone message goes as a plain publish.
// Two guards ride on the messages, both Nats-Expected-Last-Subject-Sequence
// with Nats-Expected-Last-Subject-Sequence-Subject naming a wildcard:
//
//   - the first record expects the last message on mspd.log.<session>.*
//     to be the head Commit read (stream sequence, 0 for an empty log), so
//     if another writer appended in between the whole batch is refused;
//   - every ledger entry expects mspd.cmd.<command>.* to be empty, so a
//     command id already admitted, under any session, refuses the batch.
//
// A refused guard is store.ErrConflict, and nothing of the batch is
// written. Commit also refuses, before sending, a first seq other than the
// head it read plus one, a gap inside the batch, and a command id twice in
// one batch (the server checks every guard against the stream as it was
// before the batch, so it would let a repeated id through). The per-session
// seq therefore stays dense and strictly monotonic whatever the number of
// writers; the concurrent-writer test races two stores for every seq.
//
// Durability is the server's: with one replica an acknowledged batch is in
// the leader's files, and it reaches the disk at once only if the server
// runs with sync_interval: always (the tests do; the default syncs every
// two minutes, which can lose acknowledged writes on power loss — SQLite's
// store fsyncs every commit). With three replicas an acknowledged batch is
// on a quorum of two servers.
//
// Before it sends, Commit reads the session's head; while the stream elects
// a leader that read is asked again (it is idempotent), within ctx and
// Options.CommitTimeout, so a node's restart pauses a turn rather than
// failing it. Once a batch is sent, Commit no longer heeds ctx: it waits up to
// Options.CommitTimeout for the answer. A lost answer (timeout, reconnect)
// is resent; the first message carries a Nats-Msg-Id, and in a batch the
// server checks message ids before guards, so a batch that had landed is
// answered "duplicate" and Commit reports success. If no answer comes
// within CommitTimeout the error wraps ErrOutcomeUnknown: the one case
// where, unlike SQLite, an error may hide a write. The session layer treats
// a failed Commit as a failed store, and the log (read back from Head) is
// the truth after a restart.
//
// Cost: the server stages a batch before applying it. On a replicated
// stream it stages in memory (about 0.2–0.4 ms per Commit here, three
// nodes on one 2-core machine); on a one-replica file stream it stages in
// a store of its own on disk, about 15–20 ms per multi-message Commit
// whatever sync_interval is. One replica is for development and tests; the
// single-node deployment is store/sqlite.
//
// # Reading a log after a cursor
//
// Seqs are dense per session but stream sequences are shared by every
// session, so finding record n must not mean walking the session's log
// from its start. Records are grouped 32 to a subject (a page): record n
// is on page (n-1)/32, and the first record of that page is one get
// (next message on that page's subject). From a record d at stream
// sequence S, record n cannot sit before S+(n-d) (each record between
// takes a sequence of its own), so the next record of the session from
// there is n itself or closer to it; a batch's records are contiguous in
// the stream, so this usually takes one or two gets, at most 32 when the
// page's records are scattered among other sessions'. RecordsBefore is the
// same forward read from before-limit, seqs being dense. Then the read goes
// on with single direct gets for up to 16 records, and in direct-get
// batches of 256 beyond (a batch request makes the server count what
// remains first, about a millisecond, more than several gets). A tail read
// of ten records takes about 0.45 ms on one server here.
//
// The index is the subject itself: no extra write per Commit, nothing to
// repair after a crash. The price is one subject per 32 records in the
// server's per-subject index (in memory), instead of one per session.
//
// # Replicas and consistent reads
//
// Direct gets are answered by any replica, and a follower may lag. With
// one replica that is the leader, so every read reflects every
// acknowledged Commit. With more, single gets (Head, Session, Command, and
// a Commit's head check) go to the leader's STREAM.MSG.GET API instead,
// and a scan, when its replica says the end is reached, asks the leader
// whether anything follows and carries on if so. Sessions and
// BusySessions ask the leader which index entries it holds, and its last
// sequence; a replica's batch of last messages counts only when the
// replica answered as of that sequence or later (Nats-UpTo-Sequence), and
// what it did not answer is asked of the leader, one get a subject. A
// read therefore reflects every Commit acknowledged before it began; what
// it may still see is a ledger entry pruned or a log purged a moment
// earlier (PruneCommands skips entries already gone).
//
// # Listing, pruning, deleting
//
// Sessions reads one owner's index (the entries on mspd.own.<owner>.*,
// headers only), sorts it in memory and reads the page's rows:
// O(that owner's sessions + limit), whatever other owners hold, in a
// handful of requests. The leader names the entry subjects and its last
// sequence (stream info with that filter, from its per-subject index);
// the entries, then the page's rows, are read by subject in direct-get
// batches of up to 256 (multi_last), which find each subject's last
// message without walking the stream and are answered by the nearest
// replica. A list of 50 is three requests (it was 101 leader gets). Bob's
// one session beside alice's 4,000 lists as fast as with no one beside
// him (BenchmarkSessionsBesideOthers). The entry is written in the batch
// of its row, so the two never disagree but for a Commit landing between
// the two reads (the row read then is the newer). Rows from before the
// index (no Mspd-Owner header) are indexed by Open, their owner taken
// from their state (store.LegacyOwner): every node of a deployment must
// run a version that writes the index (see Layout).
//
// BusySessions reads the busy index. Every batch that writes a row writes
// its busy entry, mspd.busy.<session>, rolled up: Mspd-Busy: 1 for a busy
// row; for an idle one Mspd-Busy: 0 with a per-message TTL (Nats-TTL, 1 s;
// the stream has AllowMsgTTL), so that its rollup removes the busy entry
// and it then expires itself: the subject holds nothing for a session
// that is not busy. BusySessions asks the leader which busy subjects there
// are (from its per-subject index) and reads their rows as Sessions reads
// a page's; the row is the truth, so a row no longer busy (the entries
// gone idle within the TTL), erasing or gone is left out. O(busy
// sessions), where it read every row before: 10 busy sessions beside
// 1,000 or 10,000 idle ones read in under half a millisecond either way,
// where the scan took 8.9 and 93 ms (BenchmarkBusySessionsBeside). A scan
// of mspd.busy.* instead would walk the stream's blocks between its
// entries.
//
// PruneCommands goes by CreatedAt, which the caller may set, so it reads
// the ledger's entries (O(ledger), bounded by the retention window), picks
// the oldest created before the cutoff and deletes them by stream
// sequence. Per-message TTLs (Nats-TTL, which the busy index uses) were
// not used for it: the retention is store.Pruner's policy, CreatedAt need
// not be the time of the write, and a pruned id must be reusable at once.
//
// DeleteSession purges mspd.log.<session>.*, then mspd.cmd.*.<session>,
// mspd.txt.*.<session>, mspd.own.*.<session> and mspd.busy.<session>, then
// mspd.row.<session>: six purges, not one atomic step. First it replaces
// the row by a tombstone (Mspd-Erasing, not busy, with an idle busy
// entry), so a deletion cut short reads back as store.Session.Erasing, left out of listings, never as a
// live session whose log has gone; a second DeleteSession finishes it.
// The row is marked again after the log's purge: a commit fenced by the
// head may have overwritten the first mark, and none lands once the log
// has gone. A purge removes the messages from the stream;
// the bytes may stay in the servers' block files and raft logs until those
// are compacted, where SQLite overwrites them (secure_delete) at once.
//
// # Layout
//
// mspd.meta.layout holds the layout version the stream is written in: 2,
// the owner index and the busy index (3 on stream 0 of a deployment that
// has used more than one stream: the same, plus the count list; see Streams). Open
// reads it first and refuses a stream of a newer layout (ErrNewerLayout: "the stream was written by a
// newer mspd (layout N); this one reads layout 3: upgrade it") before it
// touches the stream's configuration. Below 2, or without a marker (a
// stream written before there was one), Open turns message TTLs on, gives
// each row the entries it lacks (an ownerless row its owner's entry, the
// owner taken from its state by store.LegacyOwner, rewritten unchanged but
// for the Mspd-Owner header; a busy row without a busy entry that entry),
// each in one batch guarded by the row's stream sequence so that a row
// rewritten meanwhile by a Commit is left alone, and then writes the
// marker: one scan of the rows, once. At 2 Open reads no row. In a rolling
// upgrade the nodes of the older version still running write busy rows
// without busy entries, which the new nodes do not adopt; once the last
// of them has stopped, purge the marker (nats stream purge MSPD --subject
// mspd.meta.layout) and restart one node, whose Open indexes them. There is
// no way back: a stream's message TTLs cannot be turned off, so an older
// mspd fails to open it ("message TTL status can not be disabled").
//
// # Other differences from store/sqlite
//
// A Commit holds at most 1000 messages (the server's max_batch_size; a row
// counts three, with its index and busy entries) and
// each record, row or ledger entry at most the server's max_payload (1 MB
// by default); larger ones fail and write nothing. Ids are limited by
// the subject length the server accepts. Two processes on one stream are
// the point here, so there is no lock file; which node runs a session's
// turns is the caller's lease.
package jetstream
