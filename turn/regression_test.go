package turn_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mspd/turn"
)

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
