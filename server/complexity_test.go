package server

import (
	"bytes"
	"encoding/json"
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
		`{"jsonrpc":"2.0","id":1,"method":"turn/start","params":{"commandId":"` + newCommandID() + `","sessionId":"x","input":[` + items + `]}}`,
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
		return `{"jsonrpc":"2.0","id":"` + id + `","method":"turn/start","params":{"commandId":"` + newCommandID() +
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

// skipValue finds the end of any JSON value, strings with escaped quotes
// and brackets inside them included.
func TestSkipValue(t *testing.T) {
	for _, v := range []string{
		`"a\"}]b"`, `"\\"`, `{}`, `[]`, `{"a":[1,{"b":"}"}],"c":"]"}`, `-1.5e+3`, `true`, `null`,
		`[[],[[]],{"x":{}}]`, `{"a\\":"\\\"}"}`,
	} {
		doc := v + ` , "next"`
		if got := skipValue([]byte(doc), 0); got != len(v) {
			t.Errorf("skipValue(%s) = %d, want %d", doc, got, len(v))
		}
	}
}

// Only the top-level responseSchema has the larger bound: the same name
// deeper in the params, or a name merely containing it, counts as params.
func TestOnlyTheTopLevelResponseSchemaHasTheLargerBound(t *testing.T) {
	big := `{"type":"object","properties":{` + strings.TrimSuffix(strings.Repeat(`"p":{"type":"string"},`, maxParamValues/2), ",") + `}}`
	for _, c := range []struct {
		params string
		field  any // nil: accepted
	}{
		{`{"commandId":"c","responseSchema":` + big + `}`, nil},
		{` { "responseSchema" : ` + big + ` , "sessionId" : "s\"}" } `, nil},
		{`{"input":[{"responseSchema":` + big + `}]}`, "params"},
		{`{"xresponseSchema":` + big + `}`, "params"},
		{`{"a\"responseSchema":` + big + `}`, "params"},
	} {
		e := tooManyValues([]byte(c.params))
		switch {
		case c.field == nil && e != nil:
			t.Errorf("%.60s…: refused: %v", c.params, e)
		case c.field != nil && (e == nil || e.Data.Details["limitValues"] != maxParamValues):
			t.Errorf("%.60s…: %v, want refused at the params' bound", c.params, e)
		}
	}
}

// BenchmarkTooManyValues: the value bounds on a turn/start of a few hundred
// bytes, which every request pays before its validation.
func BenchmarkTooManyValues(b *testing.B) {
	p := []byte(`{"commandId":"019ad0a0-0000-7000-8000-000000000004","sessionId":"019ad0a0-0000-7000-8000-000000000005","input":[{"type":"text","text":"{\"mspdScript\":[{\"text\":\"ok\"}]} and some more text to make it a realistic user message of a few hundred bytes, as a chat page would send; lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua."}]}`)
	b.ReportAllocs()
	for b.Loop() {
		if tooManyValues(p) != nil {
			b.Fatal("refused")
		}
	}
}

// A responseSchema repeated at the top level shares one bound: the
// validator decodes every copy (the last one wins), so a bound a copy let
// 60 copies of 48,000 values through, 498 MB of validator tree.
func TestRepeatedResponseSchemasShareTheBound(t *testing.T) {
	one := `{"type":"object","properties":{"p":{"type":"string","enum":[` +
		strings.TrimSuffix(strings.Repeat(`{"x":"y"},`, 16_000), ",") + `]}}}` // ~48,000 values
	var b strings.Builder
	b.WriteString(`{"commandId":"c","sessionId":"x","input":[{"type":"text","text":"t"}]`)
	for range 40 {
		b.WriteString(`,"responseSchema":` + one)
	}
	b.WriteString(`}`)
	params := []byte(b.String())
	if !json.Valid(params) {
		t.Fatal("invalid")
	}
	total := countValues(params, 1<<30)
	e := tooManyValues(params)
	if e == nil {
		t.Errorf("params of %d values (%d bytes) in 40 repeated responseSchema members passed the bounds", total, len(params))
	}
}

// FuzzSkipValue: skipValue ends every valid JSON value where encoding/json
// does, countValues agrees with its token count, and a small document
// passes the bounds.
func FuzzSkipValue(f *testing.F) {
	for _, s := range []string{`{"a":[1,{"b":"}"}],"c":"]"}`, `"\\\""`, `-1.5e+3`, `[[],{}]`, `{"a\\":"\u0022"}`, "\"\u00e9\"", `{"responseSchema":{"a":1},"x":2}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		doc := []byte(s)
		if !json.Valid(doc) {
			return
		}
		doc = bytes.TrimSpace(doc)
		if got := skipValue(append(doc, []byte(` ,"z"`)...), 0); got != len(doc) {
			t.Fatalf("skipValue(%q) = %d, want %d", doc, got, len(doc))
		}
		dec := json.NewDecoder(bytes.NewReader(doc))
		want := 0
		for {
			tok, err := dec.Token()
			if err != nil {
				break
			}
			if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
				continue
			}
			want++
		}
		if got := countValues(doc, 1<<30); got != want {
			t.Fatalf("countValues(%q) = %d, want %d", doc, got, want)
		}
		// The top-level scan must not panic and must accept small docs.
		if e := tooManyValues(doc); e != nil {
			t.Fatalf("tooManyValues(%q) refused a small doc", doc)
		}
	})
}
