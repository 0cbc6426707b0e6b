package server

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"mspd/schema/msp"
)

// Params of very many small JSON values are refused before the schema
// validator sees them: it builds a tree of the whole document and a
// finding for every bad item, so a 4 MB frame of bad items took 1.4 GB of
// heap and valid frames of many small objects 50 times their size, on
// every connection that sent one. The answer is a typed invalidParams
// naming the bound, and the connection goes on serving.
func TestParamsOfTooManyValuesAreRefusedUnread(t *testing.T) {
	items := strings.TrimSuffix(strings.Repeat(`{"type":"x"},`, 200_000), ",") // 2.6 MB, 400k values
	frames := []string{
		`{"jsonrpc":"2.0","id":1,"method":"turn/start","params":{"commandId":"` + reviewCmd() + `","sessionId":"x","input":[` + items + `]}}`,
		`{"jsonrpc":"2.0","id":2,"method":"session/list","params":{}}`,
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	answers := serveLines(t, 8<<20, frames...)
	runtime.ReadMemStats(&after)
	if len(answers) != len(frames) {
		t.Fatalf("%d answers to %d requests", len(answers), len(frames))
	}
	_, e := answerOf(t, answers[0])
	if e == nil || e.Data.Kind != msp.KindInvalidParams || e.Data.Details["limitValues"] != float64(maxParamValues) {
		t.Errorf("answer %.300s, want an invalidParams naming the bound of %d values", answers[0], maxParamValues)
	}
	if _, e := answerOf(t, answers[1]); e != nil {
		t.Errorf("the connection did not go on serving: %v", e)
	}
	// The frame is read once (a few copies of 2.6 MB); the validator's
	// tree of it was hundreds of megabytes.
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
		t.Errorf("serving a %d-byte frame allocated %d MB", len(frames[0]), got>>20)
	}
}

// countValues counts values and member names, stopping past the limit.
func TestCountValues(t *testing.T) {
	for _, c := range []struct {
		doc  string
		want int
	}{
		{`{}`, 1},
		{`[]`, 1},
		{`"a\"]}{["`, 1},
		{`{"a":1,"b":[true,false,null,-1.5e+3,"x"]}`, 10},
		{` { "a" : { "b" : [ 1 , 2 ] } } `, 7},
	} {
		if got := countValues([]byte(c.doc), 100); got != c.want {
			t.Errorf("countValues(%s) = %d, want %d", c.doc, got, c.want)
		}
	}
	if got := countValues([]byte(`[1,2,3,4,5,6,7,8,9]`), 4); got != 5 {
		t.Errorf("countValues past a limit of 4 = %d, want it to stop at 5", got)
	}
}

// A turn's responseSchema has a bound of its own, above the params': a
// structured-output schema of 2,000 properties (about 12,000 values; 95
// KB) is an ordinary one, and is not refused, while one past its bound is.
func TestResponseSchemaHasABoundOfItsOwn(t *testing.T) {
	schema := func(props int) string {
		var b strings.Builder
		for i := range props {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"field%d":{"type":"string","description":"d"}`, i)
		}
		return `{"type":"object","properties":{` + b.String() + `}}`
	}
	turn := func(id, schema string) string {
		return `{"jsonrpc":"2.0","id":"` + id + `","method":"turn/start","params":{"commandId":"` + reviewCmd() +
			`","sessionId":"x","input":[{"type":"text","text":"fill the form"}],"responseSchema":` + schema + `}}`
	}
	answers := serveLines(t, 10<<20, turn("ordinary", schema(2000)), turn("huge", schema(10_000)))
	if len(answers) != 2 {
		t.Fatalf("%d answers to 2 requests", len(answers))
	}
	// The session does not exist: an ordinary schema gets that far.
	if _, e := answerOf(t, answers[0]); e == nil || e.Data.Kind != msp.KindSessionNotFound {
		t.Errorf("a 2,000-property responseSchema: %.300s, want it past the gate (sessionNotFound)", answers[0])
	}
	if _, e := answerOf(t, answers[1]); e == nil || e.Data.Kind != msp.KindInvalidParams ||
		e.Data.Details["field"] != "responseSchema" || e.Data.Details["limitValues"] != float64(maxSchemaValues) {
		t.Errorf("a 10,000-property responseSchema: %.300s, want invalidParams naming responseSchema and its bound", answers[1])
	}
}
