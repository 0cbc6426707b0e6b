package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"mspd/client"
	"mspd/provider/scripted"
	"mspd/schema/msp"
)

// TestStdio speaks NDJSON to `mspd serve --stdio`, the spawn path of
// upstream clients: same handshake, same frames, one per line.
func TestStdio(t *testing.T) {
	cmd := mspdCommand(context.Background(), "serve", "--stdio", "--provider", "scripted", "--data", t.TempDir(), "--log-level", "error")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	lines.Buffer(nil, 16<<20)
	checker := validator.NewFrameChecker()
	send := func(frame string) {
		t.Helper()
		for _, fe := range checker.Check([]byte(strings.TrimSpace(frame))) {
			t.Errorf("client frame fails the schema: %s: %s", fe.Field, fe.Message)
		}
		if _, err := stdin.Write([]byte(frame)); err != nil {
			t.Fatal(err)
		}
	}
	read := func() map[string]json.RawMessage {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("stdout ended: %v", lines.Err())
		}
		line := lines.Bytes()
		if bytes.ContainsAny(line, "\r") {
			t.Errorf("server emitted a CR: %q", line)
		}
		for _, fe := range checker.Check(line) {
			t.Errorf("server frame fails the schema: %s: %s\n%s", fe.Field, fe.Message, line)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}

	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"stdio_test","version":"1"}}}` + "\r\n")
	if m := read(); string(m["id"]) != "1" || m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	send("\n" + `{"jsonrpc":"2.0","method":"initialized"}` + "\n")
	send(`{"jsonrpc":"2.0","id":"s","method":"session/start","params":{"commandId":"` + client.NewCommandID() + `"}}` + "\n")
	if m := read(); string(m["method"]) != `"session/started"` {
		t.Fatalf("want session/started first, got %v", m)
	}
	m := read()
	var start msp.SessionStartResult
	if err := json.Unmarshal(m["result"], &start); err != nil || string(m["id"]) != `"s"` {
		t.Fatalf("session/start: %v", m)
	}
	script, _ := json.Marshal(scripted.Script(scripted.Step{Text: "over stdio", Chunks: 2}))
	send(`{"jsonrpc":"2.0","id":2,"method":"turn/start","params":{"commandId":"` + client.NewCommandID() + `","sessionId":"` + start.Session.SessionID + `","input":[{"type":"text","text":` + string(script) + `}]}}` + "\n")
	var got []string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		m := read()
		if m["method"] == nil {
			got = append(got, "response")
			continue
		}
		var method string
		json.Unmarshal(m["method"], &method)
		got = append(got, method)
		if method == msp.NotifyTurnCompleted {
			break
		}
	}
	want := "response, turn/started, item/completed, session/nameChanged, item/started, item/delta ×2, item/completed, session/tokenUsage, turn/completed"
	if compact(got) != want {
		t.Fatalf("stdio turn:\n got %s\nwant %s", compact(got), want)
	}
	// Closing stdin is an orderly end: the process exits 0.
	stdin.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after stdin closed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("mspd did not exit after stdin closed")
	}
}

func TestValidateCommand(t *testing.T) {
	good := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"x","version":"1"}}}` + "\n" +
		`{"jsonrpc":"2.0","method":"initialized"}` + "\n"
	cmd := mspdCommand(context.Background(), "validate", "-")
	cmd.Stdin = strings.NewReader(good)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("valid transcript: %v\n%s", err, out)
	}
	bad := good + `{"jsonrpc":"2.0","id":2,"method":"turn/start","params":{"sessionId":"s","input":[]}}` + "\n" +
		`{"jsonrpc":"2.0","method":"item/delta","params":{"sessionId":"s","itemId":"i","delta":"x"}}` + "\n"
	cmd = mspdCommand(context.Background(), "validate", "-")
	cmd.Stdin = strings.NewReader(bad)
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("invalid transcript exit: %v", err)
	}
	for _, want := range []string{"line 3: params.commandId", "line 3: params.input", "line 4: params.viewCursor"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
