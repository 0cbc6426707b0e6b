package jetstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"mspd/store"
)

// Headers of JetStream's atomic batch publish (nats-server 2.12+).
const (
	hdrBatchID     = "Nats-Batch-Id"
	hdrBatchSeq    = "Nats-Batch-Sequence"
	hdrBatchCommit = "Nats-Batch-Commit"
)

// maxBatch is the server's default bound on the messages of one atomic
// batch (jetstream max_batch_size).
const maxBatch = 1000

// JetStream API error codes this package tells apart.
const (
	errCodeWrongLastSeq         = 10071 // an expected-last-subject-sequence guard failed
	errCodeWrongLastSeqConstant = 10164 // the same, on replicated streams and within batches
	errCodeDupInProcess         = 10158 // our message id is staged, its outcome not yet known
	errCodeTooManyRequests      = 10167
	errCodeIncompleteBatch      = 10176 // a message of the batch went missing
	errCodeBatchDuplicate       = 10201 // the batch carries a message id already stored
	errCodeTooManyBatches       = 10210
	errCodeDeleteFailed         = 10057 // message deletion unsuccessful (its description says why)
)

// commit writes a batch Store.Commit has validated and routed here as
// one atomic JetStream publish: every record, the row and every ledger
// entry land together or not at all. See the package doc for the guards
// and for what happens when the server does not answer.
func (s *shard) commit(ctx context.Context, b store.Batch) error {
	done, err := s.enter()
	if err != nil {
		return err
	}
	defer done()
	if len(b.Records) == 0 && b.Session == nil && len(b.Commands) == 0 && b.Text == nil {
		return nil
	}
	if err := conflictsWithin(b); err != nil {
		return err
	}
	var h headPos
	if len(b.Records) > 0 || b.AtHead != nil {
		if h, err = s.commitHead(ctx, b.SessionID); err != nil {
			return err
		}
		if len(b.Records) > 0 && b.Records[0].Seq != h.seq+1 {
			return fmt.Errorf("%w: session %q record 0 has seq %d, want %d", store.ErrConflict, b.SessionID, b.Records[0].Seq, h.seq+1)
		}
		if b.AtHead != nil && h.seq != *b.AtHead {
			return fmt.Errorf("%w: session %q is at %d, its writer at %d", store.ErrConflict, b.SessionID, h.seq, *b.AtHead)
		}
	}
	var text *nats.Msg
	if b.Text != nil {
		if text, err = s.textMsg(ctx, b.SessionID, b.Text); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err // the write has not begun
	}
	return s.publish(ctx, s.messages(b, h, time.Now(), text))
}

// commitHead reads a session's head for Commit. The read is idempotent,
// so while the stream elects a leader (a timeout, no responders, a 503) it
// is asked again, as publish asks again, within CommitTimeout and ctx: a
// rolling restart is a pause for a turn, not its failure.
func (s *shard) commitHead(ctx context.Context, sessionID string) (headPos, error) {
	bounded, cancel := context.WithTimeout(ctx, s.opts.CommitTimeout)
	defer cancel()
	for pause := 10 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		h, err := s.head(bounded, sessionID)
		if v, _ := judge(err); v != retry {
			return h, err
		}
		select {
		case <-bounded.Done():
			if ctx.Err() == nil { // the stream, not the caller, ran out of time
				s.health.Failed(errNoAnswer)
			}
			return h, err
		case <-time.After(pause):
		}
	}
}

// validate rejects malformed batches, and batches larger than one atomic
// publish takes. These are caller bugs, so they are not ErrConflict.
func validate(b store.Batch) error {
	if err := b.Validate(); err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	n := len(b.Records) + len(b.Commands)
	if b.Session != nil {
		n += 3 // the row, its index entry and its busy entry
	}
	if b.Text != nil {
		n++ // the search text
	}
	if n > maxBatch {
		return fmt.Errorf("jetstream: invalid batch: %d messages, one atomic publish takes at most %d", n, maxBatch)
	}
	return nil
}

// conflictsWithin finds the conflicts a batch has on its own: a gap in its
// records, or a command id twice. (The server would let the second entry of
// a repeated id through: its guard is checked against the stream as it was
// before the batch.)
func conflictsWithin(b store.Batch) error {
	for i, r := range b.Records {
		if want := b.Records[0].Seq + int64(i); r.Seq != want {
			return fmt.Errorf("%w: session %q record %d has seq %d, want %d", store.ErrConflict, b.SessionID, i, r.Seq, want)
		}
	}
	seen := make(map[string]bool, len(b.Commands))
	for _, c := range b.Commands {
		if seen[c.ID] {
			return fmt.Errorf("%w: command %q twice in one batch", store.ErrConflict, c.ID)
		}
		seen[c.ID] = true
	}
	return nil
}

// messages encodes a batch, guards included (a row goes with its entry in
// its owner's index and its busy entry): the first record (or, in a
// batch without records fenced by AtHead, the row) expects the session's
// last record to be h (so no other writer appended since the head was
// read), every ledger entry expects its command id to be absent.
// The first message carries a message id, so that sending the batch again
// after a lost answer is recognised as a duplicate if it had landed.
func (s *shard) messages(b store.Batch, h headPos, now time.Time, text *nats.Msg) []*nats.Msg {
	msgs := make([]*nats.Msg, 0, len(b.Records)+4+len(b.Commands))
	for i, r := range b.Records {
		m := recordMsg(s.subj.logPage(b.SessionID, r.Seq), r)
		if i == 0 {
			expect(m, h.stream, s.subj.log(b.SessionID))
		}
		msgs = append(msgs, m)
	}
	if b.Session != nil {
		m := rowMsg(s.subj.row(b.Session.ID), b.Session)
		if len(b.Records) == 0 && b.AtHead != nil {
			expect(m, h.stream, s.subj.log(b.SessionID)) // as a first record would
		}
		msgs = append(msgs, m, indexMsg(s.subj.owned(b.Session.Owner, b.Session.ID), b.Session),
			busyMsg(s.subj.busy(b.Session.ID), b.Session.Busy, s.opts.idleTTL))
	}
	for _, c := range b.Commands {
		created := store.ClampUnixNanos(now)
		if !c.CreatedAt.IsZero() {
			created, _ = store.UnixNanos(c.CreatedAt) // validated
		}
		m := commandMsg(s.subj.command(c.ID, cmp.Or(c.SessionID, b.SessionID)), c, created)
		expect(m, 0, s.subj.commandAny(c.ID))
		msgs = append(msgs, m)
	}
	if text != nil {
		msgs = append(msgs, text)
	}
	msgs[0].Header.Set(jetstream.MsgIDHeader, "mspd-"+nuid.Next())
	return msgs
}

// expect guards m: the last message on filter must be at stream sequence
// seq (0: there must be none).
func expect(m *nats.Msg, seq uint64, filter string) {
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(seq, 10))
	m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, filter)
}

// publish sends msgs until the server gives a definite answer. A lost
// answer is retried with the same message id, which the server recognises
// if the first attempt landed; a busy server is retried after a pause.
// Caller cancellation no longer applies: once sent, the batch may land, and
// an error must not hide a write.
func (s *shard) publish(ctx context.Context, msgs []*nats.Msg) error {
	return s.publishAfter(ctx, msgs, false)
}

// publishAfter is publish where unknown tells whether an earlier attempt
// may have landed unseen.
func (s *shard) publishAfter(ctx context.Context, msgs []*nats.Msg, unknown bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.CommitTimeout)
	defer cancel()
	for pause := 10 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		err := s.send(ctx, msgs, unknown)
		verdict, maybeLanded := judge(err)
		unknown = unknown || maybeLanded
		switch verdict {
		case landed:
			s.health.Wrote()
			return nil
		case conflicted:
			s.health.Wrote() // the stream answered: it takes writes
			return fmt.Errorf("%w: %v", store.ErrConflict, err)
		case failed:
			if unknown {
				return fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
			}
			return fmt.Errorf("jetstream: commit: %w", err)
		}
		select {
		case <-ctx.Done():
			// Asked again for CommitTimeout, never answered (no leader,
			// no quorum, no server): the node should take no new clients.
			s.health.Failed(errNoAnswer)
			if unknown {
				return fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
			}
			return fmt.Errorf("jetstream: commit: %w", err)
		case <-time.After(pause):
		}
	}
}

// send makes one attempt: an atomic batch whose last message commits it,
// or a plain publish for a lone message. A lone message that may have
// landed already goes as a batch too: in a batch the server checks the
// message id before the guards, so a resent message that landed is a
// duplicate, where a plain publish would fail its own guard.
func (s *shard) send(ctx context.Context, msgs []*nats.Msg, resend bool) error {
	ctx, cancel := s.timeout(ctx)
	defer cancel()
	if len(msgs) == 1 && !resend {
		ack, err := s.js.PublishMsg(ctx, msgs[0])
		if err == nil && ack.Duplicate {
			return nil // an earlier attempt landed
		}
		return err
	}
	select {
	case s.batches <- struct{}{}:
		defer func() { <-s.batches }()
	case <-ctx.Done():
		return ctx.Err()
	}
	id := nuid.Next()
	for i, m := range msgs {
		m.Header.Set(hdrBatchID, id)
		m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
	}
	last := msgs[len(msgs)-1]
	last.Header.Set(hdrBatchCommit, "1")
	// Only the commit needs an answer; the server tells a gap from the
	// sequence numbers and then refuses the whole batch.
	for _, m := range msgs[:len(msgs)-1] {
		if err := s.nc.PublishMsg(m); err != nil {
			return err
		}
	}
	_, err := s.js.PublishMsg(ctx, last)
	return err
}

// errNoAnswer is what Healthy says after a commit ran out of time asking
// the stream: no session is named, since /readyz shows it to anyone.
var errNoAnswer = errors.New("jetstream: writes are failing: the stream has not answered a commit within the commit timeout (no leader or no quorum?)")

type verdict int

const (
	landed verdict = iota
	conflicted
	retry
	failed
)

// judge classifies one attempt's error, and tells whether the attempt may
// have landed without our hearing of it.
func judge(err error) (v verdict, maybeLanded bool) {
	if err == nil {
		return landed, false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case errCodeWrongLastSeq, errCodeWrongLastSeqConstant:
			return conflicted, false
		case errCodeBatchDuplicate:
			return landed, false
		case errCodeDupInProcess:
			return retry, true
		case errCodeTooManyRequests, errCodeIncompleteBatch, errCodeTooManyBatches:
			return retry, false
		}
		if apiErr.Code == 503 { // no leader or quorum for now
			return retry, false
		}
		return failed, false
	}
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return retry, false // nobody received it
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrReconnectBufExceeded):
		return retry, true
	}
	return failed, true // e.g. the connection closed after sending
}
