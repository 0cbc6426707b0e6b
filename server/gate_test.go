package server

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestRecoverID(t *testing.T) {
	huge := strings.Repeat("x", 70<<10)
	tests := []struct {
		name   string
		prefix string
		want   string // "" for no id
	}{
		{"number id before a cut params", `{"jsonrpc":"2.0","id":7,"method":"turn/start","params":{"input":"` + huge, `7`},
		{"string id before a cut params", `{"id":"req-1","jsonrpc":"2.0","params":{"a":"` + huge, `"req-1"`},
		{"string id with escapes", `{"id":"a\"b\u00e9","params":"` + huge, `"a\"b\u00e9"`},
		{"spacing", "{ \"jsonrpc\" : \"2.0\" ,\n \"id\" : 42 , \"params\": {\"a\": \"xx", `42`},
		{"id after complete members", `{"jsonrpc":"2.0","method":"m","params":{"a":[1,2,{"b":null}]},"id":"late","x":"` + huge, `"late"`},
		{"largest id", `{"id":9223372036854775807,"params":"xx`, `9223372036854775807`},
		{"whole frame", `{"jsonrpc":"2.0","id":3,"method":"m"}`, `3`},
		{"number id followed by space", `{"id":12 `, `12`},

		{"no id", `{"jsonrpc":"2.0","method":"m","params":{"a":"` + huge, ``},
		{"id after a huge params member cut off", `{"jsonrpc":"2.0","method":"m","params":{"text":"` + huge, ``},
		{"id inside params only", `{"params":{"id":5},"method":"m","x":"` + huge, ``},
		{"cut inside a string id", `{"jsonrpc":"2.0","id":"abc`, ``},
		{"cut right after the id key", `{"id":`, ``},
		{"negative id", `{"id":-1,"params":"xx`, ``},
		{"fractional id", `{"id":1.5,"params":"xx`, ``},
		{"exponent id", `{"id":1e3,"params":"xx`, ``},
		{"id beyond int64", `{"id":9223372036854775808,"params":"xx`, ``},
		{"null id", `{"id":null,"params":"xx`, ``},
		{"boolean id", `{"id":true,"params":"xx`, ``},
		{"object id", `{"id":{"n":1},"params":"xx`, ``},
		{"array id", `{"id":[1],"params":"xx`, ``},
		{"not an object", `[{"id":1},"` + huge, ``},
		{"not JSON", `id=4&params=`, ``},
		{"empty", ``, ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, ok := recoverID([]byte(tt.prefix))
			if ok != (tt.want != "") || string(id) != tt.want {
				t.Fatalf("recoverID = %s, %v; want %q", id, ok, tt.want)
			}
		})
	}
}

// The prefix of an oversized frame is always cut somewhere. A number that
// runs to the very end of the prefix may be cut inside its digits
// ("id":12|34), so it cannot be trusted: answering with id 12 would address
// the error to another request.
func TestRecoverIDNumberCutAtTheEnd(t *testing.T) {
	frame := `{"jsonrpc":"2.0","method":"m","params":{"a":"` + strings.Repeat("y", 100) + `"},"id":1234}`
	cut := frame[:strings.Index(frame, "1234")+2] // …"id":12
	if id, ok := recoverID([]byte(cut)); ok {
		t.Fatalf("recoverID(%q) = %s from a number cut mid-way; the frame's id was 1234", cut[len(cut)-12:], id)
	}
	// With the delimiter after it, the number is whole.
	whole := frame[:strings.Index(frame, "1234")+5]
	if id, ok := recoverID([]byte(whole)); !ok || string(id) != "1234" {
		t.Fatalf("recoverID(…%q) = %s, %v", whole[len(whole)-12:], id, ok)
	}
}

func TestValidID(t *testing.T) {
	tests := []struct {
		raw  string
		ok   bool
		want string
	}{
		{`0`, true, `0`},
		{`7`, true, `7`},
		{` 7 `, true, `7`},
		{`9223372036854775807`, true, `9223372036854775807`},
		{`"x"`, true, `"x"`},
		{`""`, true, `""`},
		{`"a\"b"`, true, `"a\"b"`},
		{`"\u00e9"`, true, `"\u00e9"`},
		{``, false, ``},
		{`   `, false, ``},
		{`9223372036854775808`, false, ``},
		{`18446744073709551616`, false, ``},
		{`-1`, false, ``},
		{`-0`, false, ``},
		{`1.0`, false, ``},
		{`1e2`, false, ``},
		{`null`, false, ``},
		{`true`, false, ``},
		{`false`, false, ``},
		{`{}`, false, ``},
		{`[]`, false, ``},
		{`"unterminated`, false, ``},
		{`"bad \x escape"`, false, ``},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			id, ok := validID(json.RawMessage(tt.raw))
			if ok != tt.ok {
				t.Fatalf("validID(%s) ok = %v, want %v", tt.raw, ok, tt.ok)
			}
			if ok && string(id) != tt.want {
				t.Fatalf("validID(%s) = %s, want %s", tt.raw, id, tt.want)
			}
		})
	}
}

// members splits an object in place as json.Unmarshal into a map of
// json.RawMessage would: the same names (escapes decoded, the last of a
// repeated one), the same values.
func TestMembersMatchesUnmarshal(t *testing.T) {
	for _, doc := range []string{
		`{}`, ` { } `, `{"id":1,"method":"m","params":{"a":[1,{"b":"}"}]}}`,
		"{ \"id\" :\t\"x\" ,\n \"params\" : [ ] }", `{"id":1,"id":2}`, `{"\u0069d":"esc","i\"d":3}`,
		`{"a":null,"b":true,"c":-1.5e3,"d":"\"\\"}`,
	} {
		var want map[string]json.RawMessage
		if err := json.Unmarshal([]byte(doc), &want); err != nil {
			t.Fatal(err)
		}
		got, ok := members([]byte(doc))
		if !ok || len(got) != len(want) {
			t.Fatalf("members(%s) = %q, %v; want %q", doc, got, ok, want)
		}
		for k, v := range want {
			if string(got[k]) != string(v) {
				t.Errorf("members(%s)[%q] = %s, want %s", doc, k, got[k], v)
			}
		}
	}
	for _, doc := range []string{`[]`, `"s"`, `null`, `1`} {
		if _, ok := members([]byte(doc)); ok {
			t.Errorf("members(%s) took it for an object", doc)
		}
	}
}
