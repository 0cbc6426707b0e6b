package msp

import (
	"encoding/json"
	"math"
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
