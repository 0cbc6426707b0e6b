package jetstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"mspd/store"
)

// backfillOwners gives each row written before the owner index existed
// (one without the Mspd-Owner header) its index entry, the owner taken
// from its state as store.LegacyOwner reads it. The row is written again,
// unchanged but for that header, in one batch with its entry, guarded by
// its stream sequence: a row rewritten meanwhile by a Commit (which writes
// its entry too) is left alone. Open runs it: one scan of the rows, as
// BusySessions makes, and one batch per row still to upgrade.
func (s *Store) backfillOwners(ctx context.Context) error {
	rows, err := s.lastOn(ctx, s.subj.rows())
	if err != nil {
		return fmt.Errorf("jetstream: indexing owners: %w", err)
	}
	for subject, m := range rows {
		if len(m.header.Values(hdrOwner)) > 0 {
			continue
		}
		id, err := s.subj.rowID(subject)
		if err != nil {
			return err
		}
		row, err := decodeRow(id, m)
		if err != nil {
			return err
		}
		msg := rowMsg(subject, &row)
		expect(msg, m.seq, subject)
		msg.Header.Set(jetstream.MsgIDHeader, "mspd-"+nuid.Next())
		err = s.publish(ctx, []*nats.Msg{msg, indexMsg(s.subj.owned(row.Owner, id), &row)})
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("jetstream: indexing the owner of %q: %w", id, err)
		}
	}
	return nil
}
