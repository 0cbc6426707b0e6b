package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// errNoMsg is a get that matched no message.
var errNoMsg = errors.New("jetstream: no message")

// scanChunk is how many messages one direct-get batch asks for.
const scanChunk = 256

// singleGets is how many messages a scan reads one by one before it
// switches to batches.
const singleGets = 16

// The status headers nats.go gives a message that carries a status line.
const (
	statusHdr = "Status"
	descrHdr  = "Description"
)

// getRequest is JetStream's message-get request, for both the leader API
// and direct gets.
type getRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
	NextFor string `json:"next_by_subj,omitempty"`
	Batch   int    `json:"batch,omitempty"`
	// MaxBytes ends a batch once it has carried this much (subjects,
	// headers and payloads), after the message that reaches it; 0 is
	// the server's default, its max_pending (64 MiB).
	MaxBytes int `json:"max_bytes,omitempty"`
}

// get reads one message. With one replica the direct get is answered by
// that replica, which is the leader; with more, any replica may answer a
// direct get and it may lag, so the leader's API is asked instead.
func (s *shard) get(ctx context.Context, req getRequest) (storedMsg, error) {
	if s.verify {
		return s.leaderGet(ctx, req)
	}
	return s.directGet(ctx, req)
}

// leaderGet asks the stream leader (STREAM.MSG.GET), whose answer reflects
// every acknowledged write.
func (s *shard) leaderGet(ctx context.Context, req getRequest) (storedMsg, error) {
	ctx, cancel := s.timeout(ctx)
	defer cancel()
	body, err := json.Marshal(req)
	if err != nil {
		return storedMsg{}, err
	}
	resp, err := s.nc.RequestWithContext(ctx, s.api+"STREAM.MSG.GET."+s.opts.Stream, body)
	if err != nil {
		return storedMsg{}, fmt.Errorf("jetstream: get: %w", err)
	}
	var r struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Subject string `json:"subject"`
			Seq     uint64 `json:"seq"`
			Header  []byte `json:"hdrs"`
			Data    []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return storedMsg{}, fmt.Errorf("jetstream: get: %w", err)
	}
	if r.Error != nil {
		if r.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return storedMsg{}, errNoMsg
		}
		return storedMsg{}, fmt.Errorf("jetstream: get: %w", r.Error)
	}
	if r.Message == nil {
		return storedMsg{}, errors.New("jetstream: get: empty response")
	}
	m := storedMsg{subject: r.Message.Subject, seq: r.Message.Seq, data: r.Message.Data, header: nats.Header{}}
	if len(r.Message.Header) > 0 {
		if m.header, err = nats.DecodeHeadersMsg(r.Message.Header); err != nil {
			return storedMsg{}, fmt.Errorf("jetstream: get: %w", err)
		}
	}
	return m, nil
}

// directGet asks the stream's replicas for one message (DIRECT.GET).
func (s *shard) directGet(ctx context.Context, req getRequest) (storedMsg, error) {
	ctx, cancel := s.timeout(ctx)
	defer cancel()
	body, err := json.Marshal(req)
	if err != nil {
		return storedMsg{}, err
	}
	resp, err := s.nc.RequestWithContext(ctx, s.api+"DIRECT.GET."+s.opts.Stream, body)
	if err != nil {
		return storedMsg{}, fmt.Errorf("jetstream: direct get: %w", err)
	}
	switch st := resp.Header.Get(statusHdr); st {
	case "":
		return fromDirect(resp)
	case "404":
		return storedMsg{}, errNoMsg
	default:
		return storedMsg{}, fmt.Errorf("jetstream: direct get: status %s %s", st, resp.Header.Get(descrHdr))
	}
}

func fromDirect(msg *nats.Msg) (storedMsg, error) {
	seq, err := strconv.ParseUint(msg.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return storedMsg{}, fmt.Errorf("jetstream: direct get: sequence header: %w", err)
	}
	return storedMsg{subject: msg.Header.Get(jetstream.SubjectHeader), seq: seq, header: msg.Header, data: msg.Data}, nil
}

// scan hands fn the messages on filter from stream sequence from on, in
// stream order, until fn returns false or none are left. It reads in
// direct-get batches; with several replicas, when a replica reports the end
// it asks the leader whether anything follows, so a scan misses no write
// acknowledged before it started. Each batch is read in isolation from
// atomic commits, so a scan never sees part of a Commit. maxBytes, when
// not nil, tells before each batch how many bytes it may carry, so that a
// read bounded by bytes is not sent a batch's worth past its bound.
func (s *shard) scan(ctx context.Context, filter string, from uint64, maxBytes func() int, fn func(storedMsg) (bool, error)) error {
	// Short reads, the common case (a subscriber catching up), go as
	// single gets: a batch makes the server count what remains first,
	// which costs more than several gets.
	// one hands fn the next message get finds; done is set when there
	// is none, fn stopped or either failed.
	one := func(get func(context.Context, getRequest) (storedMsg, error)) (done bool, err error) {
		m, err := get(ctx, getRequest{Seq: from, NextFor: filter})
		if errors.Is(err, errNoMsg) {
			return true, nil
		}
		if err != nil {
			return true, err
		}
		if cont, err := fn(m); err != nil || !cont {
			return true, err
		}
		from = m.seq + 1
		return false, nil
	}
	for range singleGets {
		if done, err := one(s.get); done {
			return err
		}
	}
	for {
		limit := 0
		if maxBytes != nil {
			limit = max(maxBytes(), 1)
		}
		more, next, stopped, err := s.directBatch(ctx, filter, from, limit, fn)
		if err != nil || stopped {
			return err
		}
		from = next
		if more {
			continue
		}
		if !s.verify {
			return nil
		}
		if done, err := one(s.leaderGet); done {
			return err
		}
	}
}

// directBatch runs one direct-get batch of up to scanChunk messages and
// maxBytes bytes (0: the server's default). It returns whether the replica
// has more, the sequence to continue from, and whether fn stopped the
// scan.
func (s *shard) directBatch(ctx context.Context, filter string, from uint64, maxBytes int, fn func(storedMsg) (bool, error)) (more bool, next uint64, stopped bool, err error) {
	next = from
	end, err := s.directMany(ctx, getRequest{Seq: from, NextFor: filter, Batch: scanChunk, MaxBytes: maxBytes}, "scan "+filter,
		func(m storedMsg) (bool, error) {
			next = m.seq + 1
			return fn(m)
		})
	if err != nil || end == nil {
		return false, next, end == nil && err == nil, err
	}
	np := end.Header.Get("Nats-Num-Pending")
	return end.Header.Get(statusHdr) == "204" && np != "" && np != "0", next, false, nil
}

// directMany sends a direct get whose answer comes as several messages
// (a batch, or multi_last), hands each to fn until fn returns false, and
// returns the status message that ended the answer: 204 (end of batch)
// or 404 (nothing matched); nil when fn stopped it.
func (s *shard) directMany(ctx context.Context, req any, what string, fn func(storedMsg) (bool, error)) (*nats.Msg, error) {
	ctx, cancel := s.timeout(ctx)
	defer cancel()
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	reply, replies, stop := s.replies.open()
	defer stop()
	if err := s.nc.PublishRequest(s.api+"DIRECT.GET."+s.opts.Stream, reply, body); err != nil {
		return nil, fmt.Errorf("jetstream: %s: %w", what, err)
	}
	for {
		var msg *nats.Msg
		select {
		case msg = <-replies:
		case <-ctx.Done():
			return nil, fmt.Errorf("jetstream: %s: %w", what, ctx.Err())
		}
		switch st := msg.Header.Get(statusHdr); st {
		case "":
			m, err := fromDirect(msg)
			if err != nil {
				return nil, err
			}
			if cont, err := fn(m); err != nil || !cont {
				return nil, err
			}
		case "204", "404":
			return msg, nil
		default:
			return nil, fmt.Errorf("jetstream: %s: status %s %s", what, st, msg.Header.Get(descrHdr))
		}
	}
}

// inbox routes the replies to direct-get batches to their scans through
// one wildcard subscription: a subscription per request would cost the
// server about a millisecond each.
type inbox struct {
	prefix string
	sub    *nats.Subscription

	mu      sync.Mutex
	n       uint64
	waiting map[string]chan *nats.Msg
}

func newInbox(nc *nats.Conn) (*inbox, error) {
	in := &inbox{prefix: nats.NewInbox() + ".", waiting: map[string]chan *nats.Msg{}}
	sub, err := nc.Subscribe(in.prefix+"*", in.deliver)
	if err != nil {
		return nil, fmt.Errorf("jetstream: reply subscription: %w", err)
	}
	in.sub = sub
	return in, nil
}

// open returns a reply subject, the channel its messages arrive on, and a
// func to call when done with them.
func (in *inbox) open() (string, <-chan *nats.Msg, func()) {
	// Room for a whole batch and its end marker, so deliver never blocks.
	ch := make(chan *nats.Msg, scanChunk+2)
	in.mu.Lock()
	in.n++
	token := strconv.FormatUint(in.n, 36)
	in.waiting[token] = ch
	in.mu.Unlock()
	return in.prefix + token, ch, func() {
		in.mu.Lock()
		delete(in.waiting, token)
		in.mu.Unlock()
	}
}

func (in *inbox) deliver(m *nats.Msg) {
	in.mu.Lock()
	ch := in.waiting[strings.TrimPrefix(m.Subject, in.prefix)]
	in.mu.Unlock()
	if ch != nil {
		ch <- m
	}
}

func (in *inbox) close() error { return in.sub.Unsubscribe() }

// leaderView is what the stream leader holds on a subject filter: the
// subjects (with their message counts) and the stream's last sequence,
// which a replica's answer must reach to be as new as the leader's.
type leaderView struct {
	subjects map[string]uint64
	last     uint64
}

// ids are the session ids of the view's subjects, each parsed by id (a
// subject family's own, e.g. subjects.busyID), in no order.
func (v leaderView) ids(id func(subject string) (string, error)) ([]string, error) {
	ids := make([]string, 0, len(v.subjects))
	for subject := range v.subjects {
		sid, err := id(subject)
		if err != nil {
			return nil, err
		}
		ids = append(ids, sid)
	}
	return ids, nil
}

// lastOf reads the last message of each of subjects, as new as a leader
// whose last sequence was last: in direct-get batches of scanChunk
// subjects (multi_last), answered by whichever replica is nearest; what a
// replica behind last answered, or did not have, is asked of the leader
// one get at a time. A subject with no message is left out. One request
// a page instead of one a subject is what keeps a list's tail short (see
// docs/scaling.md).
func (s *shard) lastOf(ctx context.Context, subjects []string, last uint64) (map[string]storedMsg, error) {
	got := make(map[string]storedMsg, len(subjects))
	for chunk := range slices.Chunk(subjects, scanChunk) {
		msgs, upTo, err := s.directLast(ctx, chunk)
		if err != nil {
			return nil, err
		}
		if s.replicaAnswer != nil {
			msgs, upTo = s.replicaAnswer(chunk, msgs, upTo)
		}
		if upTo < last {
			continue // a lagging replica: the leader answers below
		}
		for _, m := range msgs {
			got[m.subject] = m
		}
	}
	var missing []string
	for _, subject := range subjects {
		if _, ok := got[subject]; !ok {
			missing = append(missing, subject)
		}
	}
	fetched, err := getEach(ctx, missing, func(ctx context.Context, subject string) (storedMsg, bool, error) {
		m, err := s.leaderGet(ctx, getRequest{LastFor: subject})
		if errors.Is(err, errNoMsg) {
			return storedMsg{}, false, nil
		}
		return m, err == nil, err
	})
	if err != nil {
		return nil, err
	}
	for _, m := range fetched {
		got[m.subject] = m
	}
	return got, nil
}

// directLast asks a replica for the last message of each of subjects
// (at most scanChunk) in one direct-get batch. upTo is the stream
// sequence the replica answered as of; 0 when it could not say (no
// subject had a message there), which leaves every subject to the leader.
func (s *shard) directLast(ctx context.Context, subjects []string) (msgs []storedMsg, upTo uint64, err error) {
	end, err := s.directMany(ctx, multiLastRequest{Subjects: subjects}, "last messages", func(m storedMsg) (bool, error) {
		msgs = append(msgs, m)
		return true, nil
	})
	if err != nil || end.Header.Get(statusHdr) == "404" {
		return nil, 0, err
	}
	if upTo, err = strconv.ParseUint(end.Header.Get(upToHdr), 10, 64); err != nil {
		return nil, 0, fmt.Errorf("jetstream: last messages: %s header: %w", upToHdr, err)
	}
	return msgs, upTo, nil
}

// multiLastRequest is a direct get of several subjects' last messages.
type multiLastRequest struct {
	Subjects []string `json:"multi_last"`
}

// upToHdr is the header of a multi_last batch's end that names the
// sequence it was answered as of.
const upToHdr = "Nats-UpTo-Sequence"
