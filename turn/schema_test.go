package turn_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mspd/turn"
)

func TestCompileSchemaRejects(t *testing.T) {
	tests := []struct {
		name, schema, want string
	}{
		{"not JSON", `{"type":`, "not JSON"},
		{"empty", ``, "not JSON"},
		{"array", `[{"type":"object"}]`, "must be a JSON Schema object"},
		{"string", `"object"`, "must be a JSON Schema object"},
		{"boolean", `true`, "must be a JSON Schema object"},
		{"null", `null`, "must be a JSON Schema object"},
		{"bad type", `{"type": 12}`, "does not compile"},
		{"unknown type name", `{"type": "integerish"}`, "does not compile"},
		{"bad pattern", `{"type":"string","pattern":"("}`, "does not compile"},
		{"dangling ref", `{"$ref":"#/$defs/missing"}`, "does not compile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := turn.CompileSchema(json.RawMessage(tt.schema))
			if err == nil || s != nil {
				t.Fatalf("CompileSchema(%s) = %v, %v; want an error", tt.schema, s, err)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "responseSchema") {
				t.Fatalf("error %q, want it to start with responseSchema and contain %q", err, tt.want)
			}
		})
	}
}

func TestCompileSchemaAccepts(t *testing.T) {
	for _, schema := range []string{
		`{}`,
		`{"type":"object"}`,
		` {"type":"object","properties":{"a":{"$ref":"#/$defs/n"}},"$defs":{"n":{"type":"number"}}} `,
	} {
		if _, err := turn.CompileSchema(json.RawMessage(schema)); err != nil {
			t.Errorf("CompileSchema(%s): %v", schema, err)
		}
	}
}

// check calls Check, turning a panic into an error so that one bad case
// does not take the whole test binary down.
func check(s *turn.Schema, answer string) (panicked any, err error) {
	defer func() { panicked = recover() }()
	return nil, s.Check(answer)
}

func TestSchemaCheck(t *testing.T) {
	s, err := turn.CompileSchema(json.RawMessage(`{
		"type": "object",
		"properties": {
			"answer": {"type": "integer"},
			"tags": {"type": "array", "items": {"type": "string"}}
		},
		"required": ["answer"]
	}`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, answer string
		want         []string // substrings of the error; nil for a valid answer
	}{
		{"plain", `{"answer": 42}`, nil},
		{"surrounding space", "\n  {\"answer\": 42}  \n", nil},
		{"fenced json", "```json\n{\"answer\": 42, \"tags\": [\"a\"]}\n```", nil},
		{"fenced without language", "```\n{\"answer\": 42}\n```", nil},
		{"fenced with space around", "  ```json\n{\"answer\": 1}\n```\n", nil},
		{"invalid JSON", `{"answer": 42`, []string{"not valid JSON"}},
		{"prose", `The answer is 42.`, []string{"not valid JSON"}},
		{"two values", `{"answer": 1} {"answer": 2}`, []string{"not valid JSON"}},
		{"empty", ``, []string{"not valid JSON"}},
		// The message names the location as a dotted field path, as
		// msp.ValidationErrors words it for invalidParams.
		{"wrong type at a member", `{"answer": "forty-two"}`, []string{"answer: ", "integer"}},
		{"wrong type deep", `{"answer": 1, "tags": ["a", 2]}`, []string{"tags.1: ", "string"}},
		{"missing required", `{"tags": []}`, []string{"answer: ", "required"}},
		{"not an object", `[42]`, []string{"object", "array"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := check(s, tt.answer)
			if p != nil {
				t.Fatalf("Check(%q) panicked: %v", tt.answer, p)
			}
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Check(%q): %v", tt.answer, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check(%q) accepted the answer", tt.answer)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check(%q) = %q, want it to contain %q", tt.answer, err, w)
				}
			}
		})
	}
}

// TestSchemaRefDoesNotReadLocalFiles: a turn's responseSchema comes
// from the client (turn/start). CompileSchema uses jsonschema.NewCompiler's
// default loader, which is a FileLoader, so a "$ref" to a file:// URL (or
// a relative ref, resolved against the process's working directory) makes
// the server open and parse any local file the client names. The schema
// below only validates strings if the file was read.
func TestSchemaRefDoesNotReadLocalFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "secret-schema.json")
	if err := os.WriteFile(path, []byte(`{"type":"string"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	raw := json.RawMessage(`{"$ref":"file://` + filepath.ToSlash(path) + `"}`)
	s, err := turn.CompileSchema(raw)
	if err != nil {
		if strings.Contains(err.Error(), "secret-schema") {
			t.Errorf("refused, but the error names the local file: %v", err)
		}
		return // refused without touching the file system: fine
	}
	if s.Check(`42`) != nil && s.Check(`"x"`) == nil {
		t.Errorf("CompileSchema loaded %s from the server's disk through a client-supplied $ref", path)
	} else {
		t.Errorf("CompileSchema accepted an external file $ref")
	}
}

// TestSchemaRefProbesFiles: the compile error of a $ref to a
// non-JSON local file tells the client the file exists (and how it starts),
// while a missing one reads differently: a file-existence oracle.
func TestSchemaRefProbesFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "passwd")
	if err := os.WriteFile(path, []byte("root:x:0:0:root:/root:/bin/bash\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errExists := turn.CompileSchema(json.RawMessage(`{"$ref":"file://` + filepath.ToSlash(path) + `"}`))
	_, errMissing := turn.CompileSchema(json.RawMessage(`{"$ref":"file://` + filepath.ToSlash(filepath.Join(dir, "nope")) + `"}`))
	if errExists == nil || errMissing == nil {
		t.Fatalf("errors %v / %v", errExists, errMissing)
	}
	t.Logf("existing: %v\nmissing:  %v", errExists, errMissing)
	strip := func(e error) string {
		return strings.NewReplacer(path, "", filepath.Join(dir, "nope"), "").Replace(e.Error())
	}
	if strip(errExists) != strip(errMissing) {
		t.Errorf("the compile error differs for an existing and a missing local file: the server read the disk")
	}
}
