package provider

import (
	"reflect"
	"testing"
)

// A session that switched families sends the other family's steps as
// text, its own as calls, and calls of an unknown provider as calls.
func TestForeignToolsAsText(t *testing.T) {
	user := Message{Role: RoleUser, Text: "hi"}
	oaStep := Message{Role: RoleAssistant, Text: "Let me see.", Provider: "openai", ToolCalls: []ToolCall{
		{ID: "call_1", Name: "files__read", Args: `{"path":"a"}`}, {ID: "call_2", Name: "files__rm", Args: `{}`}}}
	oaResults := Message{Role: RoleTool, ToolResults: []ToolResult{
		{CallID: "call_1", Name: "files__read", Text: "alpha"}, {CallID: "call_2", Name: "files__rm", Text: "denied", IsError: true}}}
	anStep := Message{Role: RoleAssistant, Provider: "claude", ToolCalls: []ToolCall{{ID: "toolu_1", Name: "files__read", Args: `{"path":"b"}`}}}
	anResults := Message{Role: RoleTool, ToolResults: []ToolResult{{CallID: "toolu_1", Name: "files__read", Text: "beta"}}}
	old := Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "x", Name: "files__read", Args: `{}`}}}
	oldResults := Message{Role: RoleTool, ToolResults: []ToolResult{{CallID: "x", Text: "gamma"}}}
	answer := Message{Role: RoleAssistant, Text: "done", Provider: "openai"}
	in := []Message{user, oaStep, oaResults, answer, user, anStep, anResults, old, oldResults}

	isClaude := func(id string) bool { return id == "claude" }
	got := ForeignToolsAsText(in, isClaude)
	want := []Message{user,
		{Role: RoleAssistant, Provider: "openai", Text: "Let me see.\n\n" +
			`[I called the tool files__read with the arguments {"path":"a"}; it returned: alpha]` + "\n\n" +
			`[I called the tool files__rm with the arguments {}; it failed: denied]`},
		answer, user, anStep, anResults, old, oldResults}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("as seen by claude:\n got %+v\nwant %+v", got, want)
	}
	if got := ForeignToolsAsText(in, func(string) bool { return true }); !reflect.DeepEqual(got, in) {
		t.Errorf("all native: %+v", got)
	}
	if got := ForeignToolsAsText(in, nil); !reflect.DeepEqual(got, in) {
		t.Errorf("nil native: %+v", got)
	}
}
