package msp

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestEncodeNotification(t *testing.T) {
	params := json.RawMessage(`{"sessionId":"s","delta":"<b>&</b>"}`)
	for _, ms := range []int64{0, 1764480000123, math.MaxInt64, math.MinInt64} {
		frame := EncodeNotification(NotifyItemDelta, params, ms)
		var got struct {
			JSONRPC     string          `json:"jsonrpc"`
			Method      string          `json:"method"`
			Params      json.RawMessage `json:"params"`
			EmittedAtMs int64           `json:"emittedAtMs"`
		}
		if err := json.Unmarshal(frame, &got); err != nil {
			t.Fatalf("%s: %v", frame, err)
		}
		if got.JSONRPC != "2.0" || got.Method != NotifyItemDelta || string(got.Params) != string(params) || got.EmittedAtMs != ms {
			t.Errorf("frame %s", frame)
		}
		// One allocation, sized right: a replay encodes thousands of these.
		if cap(frame) < len(frame) || cap(frame)-len(frame) > notificationOverhead {
			t.Errorf("frame of %d bytes has capacity %d", len(frame), cap(frame))
		}
	}
	// A method that is not plain ASCII is still valid JSON.
	for _, method := range []string{`a"b`, `a\b`, "tab\there", "é/ü", "\x7f"} {
		var got struct{ Method string }
		if err := json.Unmarshal(EncodeNotification(method, params, 1), &got); err != nil || got.Method != method {
			t.Errorf("method %q came back %q (%v)", method, got.Method, err)
		}
	}
	if n := testing.AllocsPerRun(100, func() { EncodeNotification(NotifyItemDelta, params, math.MinInt64) }); n != 1 {
		t.Errorf("%v allocations a frame, want 1", n)
	}
}

// EncodeItemDelta writes by hand what Marshal and EncodeNotification
// write by reflection, byte for byte, for any text: escapes, U+2028, and
// invalid UTF-8 included.
func TestEncodeItemDeltaMatchesMarshal(t *testing.T) {
	texts := []string{"", "word ", `say "hi" \ back`, "<b>&amp;</b>", "tab\tnew\nline\rcr\bbs\fff\x00\x01\x1f\x7f",
		"line\u2028para\u2029end", "bad \xff\xfe utf8 \xe2\x82", "émoji 🙂 中文", strings.Repeat("x", 5000)}
	for _, text := range texts {
		for _, field := range []string{"", "summary"} {
			p := ItemDeltaParams{SessionID: "019ad0a0-1111-7000-8000-000000000001", ViewCursor: "v:019ad0a0:3f9c0a7be1d2-3.2",
				ItemID: "it\"em", Field: field, Delta: text}
			raw, err := Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			want := EncodeNotification(NotifyItemDelta, raw, 1764480000123)
			if got := EncodeItemDelta(p, 1764480000123); !bytes.Equal(got, want) {
				t.Errorf("delta %q field %q:\n got %s\nwant %s", text, field, got, want)
			}
		}
	}
}

func FuzzEncodeItemDelta(f *testing.F) {
	f.Add("word ", "")
	f.Add("a\u2028\xff\"\\\n", "summary")
	f.Fuzz(func(t *testing.T, text, field string) {
		p := ItemDeltaParams{SessionID: "s", ViewCursor: "v:s:1.2", ItemID: "i", Field: field, Delta: text}
		raw, err := Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := EncodeItemDelta(p, 7), EncodeNotification(NotifyItemDelta, raw, 7); !bytes.Equal(got, want) {
			t.Errorf("got %s\nwant %s", got, want)
		}
	})
}

func BenchmarkEncodeItemDelta(b *testing.B) {
	p := ItemDeltaParams{SessionID: "019ad0a0-1111-7000-8000-000000000001", ViewCursor: "v:019ad0a0-1111-7000-8000-000000000001:3f9c0a7be1d2-3.2",
		ItemID: "019ad0a0-2222-7000-8000-000000000001", Delta: "word "}
	b.Run("by hand", func(b *testing.B) {
		for b.Loop() {
			EncodeItemDelta(p, 1764480000123)
		}
	})
	b.Run("Marshal+EncodeNotification", func(b *testing.B) {
		for b.Loop() {
			raw, _ := Marshal(p)
			EncodeNotification(NotifyItemDelta, raw, 1764480000123)
		}
	})
}
