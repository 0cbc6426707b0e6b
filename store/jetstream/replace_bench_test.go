package jetstream_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// replaceStored are the stored counts the replace benchmarks run at; a
// million only outside -short (its seeding takes a minute or more).
func replaceStored() []int {
	if testing.Short() {
		return []int{10_000, 100_000}
	}
	return []int{10_000, 100_000, 1_000_000}
}

// warmRows is how many of the last stored rows the "warm" updates pick
// from: chats in use now, whose previous version the server still holds.
const warmRows = 1000

// pickRow chooses the row an update replaces: any of stored, or one of
// the warmRows last stored.
func pickRow(stored int, warm bool) int {
	if warm {
		return stored - 1 - rand.IntN(min(warmRows, stored))
	}
	return rand.IntN(stored)
}

// BenchmarkReplaceOnNATS is what a row update costs NATS alone, below
// store/jetstream: on one in-process server that does not fsync,
// replacing the one message (800 bytes) of one of `stored` subjects,
// any (rows=any) or one of the 1,000 last stored (rows=warm), with a
// publish either rolled up (Nats-Rollup: sub, as store/jetstream does
// its rows) or into a stream that keeps one message a subject
// (MaxMsgsPerSubject: 1, which store/jetstream's logs rule out). Both
// remove the older message from the block it was stored in, reading that
// block back if the server has let it go. Each runs on a server of its
// own, its seeding's garbage collected before the updates are timed;
// cpu-µs/update is the process's CPU, server and client.
func BenchmarkReplaceOnNATS(b *testing.B) {
	for _, stored := range replaceStored() {
		for _, how := range []string{"rollup", "maxmsgs"} {
			for _, rows := range []string{"any", "warm"} {
				b.Run(fmt.Sprintf("stored=%d/how=%s/rows=%s", stored, how, rows), func(b *testing.B) {
					benchReplace(b, stored, how == "maxmsgs", rows == "warm")
				})
			}
		}
	}
}

// benchReplace is one case of BenchmarkReplaceOnNATS.
func benchReplace(b *testing.B, stored int, limit, warm bool) {
	js := dialJetStream(b, startServerNoSync(b).ClientURL())
	cfg := jetstream.StreamConfig{Name: "R", Subjects: []string{"r.>"}, AllowRollup: true}
	if limit {
		cfg.MaxMsgsPerSubject = 1
	}
	if _, err := js.CreateStream(b.Context(), cfg); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 800)
	msg := func(i int) *nats.Msg {
		m := nats.NewMsg(fmt.Sprintf("r.row.%07d", i))
		if !limit {
			m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		}
		m.Data = payload
		return m
	}
	publishAll(b, js, stored, msg)
	runtime.GC()
	before := cpuTime(b)
	n := 0
	for b.Loop() {
		if _, err := js.PublishMsg(b.Context(), msg(pickRow(stored, warm))); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64((cpuTime(b)-before).Microseconds())/float64(n), "cpu-µs/update")
}

// publishAll publishes msg(i) for i in [0, n), a thousand in flight.
func publishAll(b *testing.B, js jetstream.JetStream, n int, msg func(int) *nats.Msg) {
	b.Helper()
	for from := 0; from < n; from += 1000 {
		var acks []jetstream.PubAckFuture
		for i := from; i < min(from+1000, n); i++ {
			ack, err := js.PublishMsgAsync(msg(i))
			if err != nil {
				b.Fatal(err)
			}
			acks = append(acks, ack)
		}
		for _, ack := range acks {
			select {
			case <-ack.Ok():
			case err := <-ack.Err():
				b.Fatal(err)
			}
		}
	}
}

// startServerNoSync is startServer without an fsync per write.
func startServerNoSync(b *testing.B) *server.Server {
	b.Setenv("NOSYNC", "1")
	return startServer(b, b.TempDir())
}
