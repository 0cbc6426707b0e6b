package anthropictest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// recordingTB records what a check reports.
type recordingTB struct {
	testing.TB
	errs []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestCheckThinking: the fake refuses, as the API does, a thinking budget
// out of bounds, a forced tool with thinking on, and a tool loop's last
// assistant message that does not start with its thinking; it accepts the
// same requests done right, and anything without thinking.
func TestCheckThinking(t *testing.T) {
	const (
		thinks   = `{"type":"thinking","thinking":"t","signature":"s"}`
		toolUse  = `{"type":"tool_use","id":"toolu_1","name":"x","input":{}}`
		result   = `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1"}]}`
		question = `{"role":"user","content":[{"type":"text","text":"q"}]}`
	)
	loop := func(first string) string {
		return `[` + question + `,{"role":"assistant","content":[` + first + `]},` + result + `]`
	}
	for _, tc := range []struct {
		body string
		want string // a part of the error; "" for none
	}{
		{`{"max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":1024},"messages":` + loop(thinks+","+toolUse) + `}`, ""},
		{`{"max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":1024},"messages":` + loop(`{"type":"redacted_thinking","data":"d"},`+toolUse) + `}`, ""},
		{`{"max_tokens":2000,"messages":` + loop(toolUse) + `}`, ""},
		{`{"max_tokens":2000,"thinking":{"type":"disabled"},"messages":` + loop(toolUse) + `}`, ""},
		{`{"max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":1024},"messages":` + loop(toolUse) + `}`, "must start with a thinking block"},
		{`{"max_tokens":2000,"thinking":{"type":"adaptive"},"messages":` + loop(`{"type":"text","text":"x"},`+toolUse) + `}`, "but found `text`"},
		{`{"max_tokens":1024,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[` + question + `]}`, "below max_tokens"},
		{`{"max_tokens":4000,"thinking":{"type":"enabled","budget_tokens":512},"messages":[` + question + `]}`, "at least 1024"},
		{`{"max_tokens":4000,"thinking":{"type":"enabled","budget_tokens":1024},"tool_choice":{"type":"tool","name":"x"},"messages":[` + question + `]}`, "tool_choice"},
	} {
		var body map[string]any
		if err := json.Unmarshal([]byte(tc.body), &body); err != nil {
			t.Fatal(err)
		}
		rec := &recordingTB{TB: t}
		checkThinking(rec, Request{Body: body})
		switch {
		case tc.want == "" && len(rec.errs) > 0:
			t.Errorf("%s: refused: %q", tc.body, rec.errs)
		case tc.want != "" && (len(rec.errs) != 1 || !strings.Contains(rec.errs[0], tc.want)):
			t.Errorf("%s: errors %q, want one saying %q", tc.body, rec.errs, tc.want)
		}
	}
}
