package builtin

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"mspd/tool"
)

func TestCalculate(t *testing.T) {
	tests := []struct {
		expr string
		want float64
	}{
		{"1+2", 3},
		{" 2 * 3 + 4 ", 10},
		{"2+3*4", 14},
		{"(2+3)*4", 20},
		{"10-4-3", 3},
		{"100/10/5", 2},
		{"2^3^2", 512},
		{"-2^2", -4},
		{"(-2)^2", 4},
		{"2^-1", 0.5},
		{"--3", 3},
		{"+3", 3},
		{"1.5e3/3", 500},
		{".5+.25", 0.75},
		{"((((1))))", 1},
		{"7/2", 3.5},
		{"0.1+0.2", 0.30000000000000004}, // float64, as the model should be told
	}
	for _, tt := range tests {
		got, err := Calculate(tt.expr)
		if err != nil || got != tt.want {
			t.Errorf("%q = %v, %v; want %v", tt.expr, got, err, tt.want)
		}
	}
	errs := []struct{ expr, want string }{
		{"1/0", "at character 2: division by zero"},
		{"1/(2-2)", "division by zero"},
		{"0^-1", "division by zero"},
		{"", "empty"},
		{"   ", "empty"},
		{"1+", "ends where a number belongs"},
		{"(1+2", "missing )"},
		{"1+2)", `at character 4: unexpected ')'`},
		{"2*x", `unexpected 'x'`},
		{"1 2", `unexpected '2'`},
		{"1..2", `unexpected '.'`},
		{".", "is not a number"},
		{"(-8)^0.5", "not a real number"},
		{"10^400", "too large"},
		{"1e400", "too large"},
		{"2^1023*2", "too large"},
		{strings.Repeat("(", 100) + "1" + strings.Repeat(")", 100), "nested more than"},
		{strings.Repeat("-", 100) + "1", "nested more than"},
		{strings.Repeat("1+", 600) + "1", "longer than"},
	}
	for _, tt := range errs {
		got, err := Calculate(tt.expr)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q = %v, %v; want an error with %q", tt.expr, got, err, tt.want)
		}
	}
}

func TestBuiltinThroughTheClient(t *testing.T) {
	now := time.Date(2026, 3, 1, 11, 30, 0, 0, time.UTC)
	c, err := Start(func() time.Time { return now }, tool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	reg, err := tool.NewRegistry(c)
	if err != nil {
		t.Fatal(err)
	}
	clock, ok := reg.Lookup("builtin__clock")
	if !ok || !clock.Annotations.ReadOnlyHint || clock.NeedsApproval {
		t.Errorf("clock: %+v", clock)
	}
	calc, ok := reg.Lookup("builtin__calculator")
	if !ok || !calc.Annotations.ReadOnlyHint || !calc.Annotations.IdempotentHint || calc.NeedsApproval {
		t.Errorf("calculator: %+v", calc)
	}

	calls := []struct {
		name, args string
		text       string
		isError    bool
	}{
		{"builtin__clock", `{"zone":"Europe/Paris"}`, "Sunday, 1 March 2026 12:30:00 CET (Europe/Paris)", false},
		{"builtin__clock", `{}`, "Sunday, 1 March 2026 11:30:00 UTC (UTC)", false},
		{"builtin__clock", `{"zone":"Mars/Olympus"}`, `unknown time zone "Mars/Olympus"`, true},
		{"builtin__calculator", `{"expression":"(2+3)*4^2"}`, "80", false},
		{"builtin__calculator", `{"expression":"1/3"}`, "0.3333333333333333", false},
		{"builtin__calculator", `{"expression":"1/0"}`, "division by zero", true},
		{"builtin__calculator", `{"expression":"2+"}`, "ends where a number belongs", true},
	}
	for _, tt := range calls {
		res, err := reg.Call(context.Background(), tt.name, json.RawMessage(tt.args))
		if err != nil {
			t.Errorf("%s %s: %v", tt.name, tt.args, err)
			continue
		}
		if res.IsError != tt.isError || !strings.Contains(res.Text, tt.text) {
			t.Errorf("%s %s: %+v, want text with %q, isError %v", tt.name, tt.args, res, tt.text, tt.isError)
		}
	}
	res, _ := reg.Call(context.Background(), "builtin__clock", json.RawMessage(`{"zone":"Asia/Tokyo"}`))
	var structured ClockResult
	if err := json.Unmarshal(res.Structured, &structured); err != nil || structured.Time != "2026-03-01T20:30:00+09:00" {
		t.Errorf("structured %s: %v", res.Structured, err)
	}
	if _, err := reg.Call(context.Background(), "builtin__calculator", json.RawMessage(`{"expression":7}`)); tool.KindOf(err) != tool.KindArgument {
		t.Errorf("a number for the expression: %v", err)
	}
}
