package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"mspd/store"
)

// layoutVersion is the stream layout this code writes and reads: 2, the
// owner index (<p>.own.*.*) and the busy index (<p>.busy.*). A stream
// without a layout marker was written before the marker, by code that may
// have written neither index.
const layoutVersion = 2

// ErrNewerLayout is wrapped by the error Open returns for a stream whose
// layout marker names a layout newer than this code's.
var ErrNewerLayout = errors.New("jetstream: the stream was written by a newer mspd")

func newerLayout(v int64) error {
	return fmt.Errorf("%w (layout %d); this one reads layout %d: upgrade it", ErrNewerLayout, v, layoutVersion)
}

// refuseNewer fails when the existing stream opts names holds a layout
// newer than this code's, before Open updates the stream's configuration
// to this code's (which could undo a newer mspd's).
func refuseNewer(ctx context.Context, js jetstream.JetStream, opts Options) error {
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	st, err := js.Stream(ctx, opts.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("jetstream: stream %s: %w", opts.Stream, err)
	}
	m, err := st.GetLastMsgForSubject(ctx, subjects{prefix: opts.Subject}.layout())
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("jetstream: reading the layout marker: %w", err)
	}
	v, err := strconv.ParseInt(m.Header.Get(hdrLayout), 10, 64)
	if err != nil {
		return fmt.Errorf("jetstream: layout marker at %d: %w", m.Sequence, err)
	}
	if v > layoutVersion {
		return newerLayout(v)
	}
	return nil
}

// upgrade brings the stream to layoutVersion: below it (or without a
// marker) it indexes the rows written without their index entries
// (backfill), then writes the marker, so that a later Open reads the
// marker alone instead of every row.
func (s *Store) upgrade(ctx context.Context) error {
	v, seq, err := s.layout(ctx)
	switch {
	case err != nil:
		return err
	case v > layoutVersion:
		return newerLayout(v)
	case v == layoutVersion:
		return nil
	}
	if err := s.backfill(ctx); err != nil {
		return err
	}
	return s.markLayout(ctx, seq)
}

// layout reads the layout marker: its version and stream sequence, zeros
// when there is none.
func (s *Store) layout(ctx context.Context) (version int64, seq uint64, err error) {
	m, err := s.get(ctx, getRequest{LastFor: s.subj.layout()})
	if errors.Is(err, errNoMsg) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("jetstream: reading the layout marker: %w", err)
	}
	v, err := headerInt(m, hdrLayout)
	return v, m.seq, err
}

// markLayout writes the marker, guarded by the one upgrade read (seq, 0:
// none), so that a marker another node wrote meanwhile is not overwritten;
// that one is read instead.
func (s *Store) markLayout(ctx context.Context, seq uint64) error {
	m := nats.NewMsg(s.subj.layout())
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	m.Header.Set(hdrLayout, strconv.Itoa(layoutVersion))
	expect(m, seq, s.subj.layout())
	m.Header.Set(jetstream.MsgIDHeader, "mspd-"+nuid.Next())
	err := s.publish(ctx, []*nats.Msg{m})
	if !errors.Is(err, store.ErrConflict) {
		if err != nil {
			return fmt.Errorf("jetstream: writing the layout marker: %w", err)
		}
		return nil
	}
	v, _, err := s.layout(ctx)
	switch {
	case err != nil:
		return err
	case v > layoutVersion:
		return newerLayout(v)
	case v < layoutVersion:
		return fmt.Errorf("jetstream: the layout marker went to %d while this node upgraded to %d", v, layoutVersion)
	}
	return nil
}

// backfill gives each row its missing index entries: a row without the
// Mspd-Owner header (written before the owner index) its owner's entry,
// the owner taken from its state as store.LegacyOwner reads it; a busy
// row without a busy entry (written before the busy index) that entry.
// Each row's upgrade is one batch guarded by the row's stream sequence:
// a row rewritten meanwhile by a Commit (which writes its entries too) is
// left alone. One scan of the rows and one of the busy entries.
func (s *Store) backfill(ctx context.Context) error {
	rows, err := s.lastOn(ctx, s.subj.rows())
	if err != nil {
		return fmt.Errorf("jetstream: indexing rows: %w", err)
	}
	entries, err := s.lastOn(ctx, s.subj.busyAll())
	if err != nil {
		return fmt.Errorf("jetstream: indexing rows: %w", err)
	}
	for subject, m := range rows {
		id, err := s.subj.rowID(subject)
		if err != nil {
			return err
		}
		msgs, err := s.upgradeRow(id, m, entries[s.subj.busy(id)].header.Get(hdrBusy) == "1")
		if err != nil {
			return err
		}
		if msgs == nil {
			continue
		}
		err = s.publish(ctx, msgs)
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("jetstream: indexing row %q: %w", id, err)
		}
	}
	return nil
}

// upgradeRow is the batch that gives row m of session id its missing
// entries, nil when it has them; busyEntry tells whether its busy entry
// says busy. An ownerless row is written again, unchanged but for that
// header, with its entries; otherwise the busy entry goes alone, guarded
// by the row's sequence all the same.
func (s *Store) upgradeRow(id string, m storedMsg, busyEntry bool) ([]*nats.Msg, error) {
	ownerless := len(m.header.Values(hdrOwner)) == 0
	unindexedBusy := m.header.Get(hdrBusy) == "1" && m.header.Get(hdrErasing) != "1" && !busyEntry
	if !ownerless && !unindexedBusy {
		return nil, nil
	}
	var msgs []*nats.Msg
	if ownerless {
		row, err := decodeRow(id, m)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, rowMsg(m.subject, &row), indexMsg(s.subj.owned(row.Owner, id), &row))
	}
	if unindexedBusy {
		msgs = append(msgs, busyMsg(s.subj.busy(id), true, s.opts.idleTTL))
	}
	expect(msgs[0], m.seq, m.subject)
	msgs[0].Header.Set(jetstream.MsgIDHeader, "mspd-"+nuid.Next())
	return msgs, nil
}
