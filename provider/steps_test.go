package provider

import (
	"reflect"
	"testing"
)

func TestStepsGroupsCallsWithTheirResults(t *testing.T) {
	call := func(id string) ToolCall { return ToolCall{ID: id, Name: "t_" + id, Args: "{}"} }
	result := func(id string) ToolResult { return ToolResult{CallID: id, Name: "t_" + id, Text: "out " + id} }
	user := Message{Role: RoleUser, Text: "hi"}
	cases := []struct {
		name string
		in   []Message
		want []Message
	}{
		{"no tools: unchanged", []Message{user, {Role: RoleAssistant, Text: "hello"}},
			[]Message{user, {Role: RoleAssistant, Text: "hello"}}},
		{"one call per item, results in completion order, merge into the step that began them",
			[]Message{user,
				{Role: RoleAssistant, Text: "let me look"},
				{Role: RoleAssistant, ToolCalls: []ToolCall{call("a")}},
				{Role: RoleAssistant, ToolCalls: []ToolCall{call("b")}},
				{Role: RoleTool, ToolResults: []ToolResult{result("b")}},
				{Role: RoleTool, ToolResults: []ToolResult{result("a")}},
				{Role: RoleAssistant, Text: "done"}},
			[]Message{user,
				{Role: RoleAssistant, Text: "let me look", ToolCalls: []ToolCall{call("a"), call("b")}},
				{Role: RoleTool, ToolResults: []ToolResult{result("a"), result("b")}},
				{Role: RoleAssistant, Text: "done"}}},
		{"a step's text starts a new step",
			[]Message{user,
				{Role: RoleAssistant, ToolCalls: []ToolCall{call("a")}},
				{Role: RoleTool, ToolResults: []ToolResult{result("a")}},
				{Role: RoleAssistant, Text: "now b", ToolCalls: []ToolCall{call("b")}},
				{Role: RoleTool, ToolResults: []ToolResult{result("b")}}},
			[]Message{user,
				{Role: RoleAssistant, ToolCalls: []ToolCall{call("a")}},
				{Role: RoleTool, ToolResults: []ToolResult{result("a")}},
				{Role: RoleAssistant, Text: "now b", ToolCalls: []ToolCall{call("b")}},
				{Role: RoleTool, ToolResults: []ToolResult{result("b")}}}},
		{"a call without its result is answered with an error; a stray result is dropped",
			[]Message{user,
				{Role: RoleAssistant, ToolCalls: []ToolCall{call("a")}},
				{Role: RoleTool, ToolResults: []ToolResult{result("z")}},
				user},
			[]Message{user,
				{Role: RoleAssistant, ToolCalls: []ToolCall{call("a")}},
				{Role: RoleTool, ToolResults: []ToolResult{{CallID: "a", Name: "t_a", IsError: true, Text: "no result was recorded for this call"}}},
				user}},
		{"a stray result before a step does not hold its calls apart",
			[]Message{user,
				{Role: RoleTool, ToolResults: []ToolResult{result("z")}},
				{Role: RoleAssistant, ToolCalls: []ToolCall{call("a")}},
				{Role: RoleAssistant, ToolCalls: []ToolCall{call("b")}},
				{Role: RoleTool, ToolResults: []ToolResult{result("a")}},
				{Role: RoleTool, ToolResults: []ToolResult{result("b")}}},
			[]Message{user,
				{Role: RoleAssistant, ToolCalls: []ToolCall{call("a"), call("b")}},
				{Role: RoleTool, ToolResults: []ToolResult{result("a"), result("b")}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Steps(c.in); !reflect.DeepEqual(got, c.want) {
				t.Errorf("Steps:\n got %+v\nwant %+v", got, c.want)
			}
		})
	}
}
