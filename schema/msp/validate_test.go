package msp

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const (
	testSession = "0198f0aa-1111-7000-8000-0000000000aa"
	testCommand = "0198f0ab-9999-7000-8000-0000000000c1"
	testSR      = `{"stream":{"kind":"session","id":"0198f0aa-1111-7000-8000-0000000000aa"},"first":{"id":"e1","sequence":7},"last":{"id":"e1","sequence":7}}`
)

func newTestValidator(tb testing.TB) *Validator {
	tb.Helper()
	v, err := NewValidator()
	if err != nil {
		tb.Fatalf("NewValidator: %v", err)
	}
	return v
}

// fields returns the Field of each error, for compact comparisons.
func fields(errs []FieldError) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = e.Field
	}
	return out
}

func TestFingerprint(t *testing.T) {
	fp := Fingerprint()
	if !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(fp) {
		t.Fatalf("Fingerprint() = %q, want sha256:<64 lowercase hex>", fp)
	}
	sum := sha256.Sum256(SchemaJSON())
	if want := "sha256:" + hex.EncodeToString(sum[:]); fp != want {
		t.Fatalf("Fingerprint() = %q, want %q", fp, want)
	}
	// SchemaJSON hands out a copy: scribbling on it must not change the schema.
	b := SchemaJSON()
	b[0] = 'X'
	if Fingerprint() != fp || SchemaJSON()[0] == 'X' {
		t.Fatal("SchemaJSON returned the embedded bytes themselves")
	}
}

// TestSchemaConventions pins rules of msp.schema.json that the validator
// cannot see: receivers ignore unknown members, and open enums accept
// unknown values.
func TestSchemaConventions(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(SchemaJSON(), &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if ap, ok := v["additionalProperties"]; ok && ap == false {
				t.Errorf("%s: additionalProperties: false (receivers must ignore unknown members)", path)
			}
			for k, x := range v {
				walk(path+"/"+k, x)
			}
		case []any:
			for _, x := range v {
				walk(path+"/[]", x)
			}
		}
	}
	walk("", doc)

	for name, d := range doc["$defs"].(map[string]any) {
		def := d.(map[string]any)
		if def["description"] == nil {
			t.Errorf("$defs/%s has no description", name)
		}
		switch def["x-msp-openness"] {
		case "open":
			if _, ok := def["enum"]; ok {
				t.Errorf("$defs/%s: open enum must not use enum (it would reject unknown values)", name)
			}
			if _, ok := def["examples"].([]any); !ok {
				t.Errorf("$defs/%s: open enum lists no known values in examples", name)
			}
		case "closed":
			if _, ok := def["enum"].([]any); !ok {
				t.Errorf("$defs/%s: closed enum has no enum", name)
			}
		}
	}
}

func TestMethodCatalogue(t *testing.T) {
	v := newTestValidator(t)
	for _, m := range []string{
		MethodInitialize, MethodSessionStart, MethodSessionResume, MethodSessionRead, MethodSessionList,
		MethodTurnStart, MethodTurnInterrupt, MethodTurnCancel, MethodTurnUnqueue,
		MethodViewSubscribe, MethodViewUnsubscribe, MethodViewPage, MethodModelList, MethodItemReadOutput,
		MethodSessionSetApprovalMode, MethodApprovalDecide, MethodApprovalListPending,
		MethodSessionSetReasoningEffort,
	} {
		if !v.HasRequest(m) || v.HasNotification(m) {
			t.Errorf("%s: want a request", m)
		}
	}
	for _, m := range []string{
		NotifyInitialized, NotifySessionStarted, NotifyTurnStarted, NotifyTurnCompleted, NotifyTurnUnqueued,
		NotifyTurnRetryScheduled, NotifyTurnModelRetryScheduled, NotifyItemStarted, NotifyItemDelta,
		NotifyItemUpdated, NotifyItemCompleted, NotifyViewGap, NotifySessionTokenUsage,
		NotifyApprovalRequested, NotifyApprovalResolved, NotifySessionApprovalModeChanged,
		NotifySessionReasoningEffortChanged,
	} {
		if !v.HasNotification(m) || v.HasRequest(m) {
			t.Errorf("%s: want a notification", m)
		}
	}
	if !v.HasServerRequest(RequestApproval) || v.HasRequest(RequestApproval) || v.HasNotification(RequestApproval) {
		t.Errorf("%s: want a server-to-client request", RequestApproval)
	}
	if v.HasRequest("turn/steer") || v.HasNotification("item/retracted") {
		t.Error("methods mspd does not serve are in the catalogue")
	}
}

func TestParams(t *testing.T) {
	v := newTestValidator(t)
	turnStart := func(extra string) string {
		return `{"commandId":"` + testCommand + `","sessionId":"` + testSession + `","input":[{"type":"text","text":"hi"}]` + extra + `}`
	}
	tests := []struct {
		name   string
		method string
		params string
		want   []string // fields of the expected errors; empty = valid
	}{
		{"turn/start minimal", MethodTurnStart, turnStart(""), nil},
		{"turn/start with RFC 0248 members", MethodTurnStart, turnStart(`,"retry":{"maxAttempts":16,"growMaxTokens":false},"maxTokens":256,"responseSchema":{"type":"object"}`), nil},
		{"unknown members tolerated", MethodTurnStart, turnStart(`,"futureOptionalField":{"x":1},"retry":{"maxAttempts":3,"later":true}`), nil},
		{"commandId upper-case UUID", MethodTurnStart, strings.Replace(turnStart(""), testCommand, strings.ToUpper(testCommand), 1), nil},
		{"missing commandId", MethodTurnStart, `{"sessionId":"s","input":[{"type":"text","text":"hi"}]}`, []string{"commandId"}},
		{"commandId not a UUID", MethodTurnStart, strings.Replace(turnStart(""), testCommand, "cmd-1", 1), []string{"commandId"}},
		{"absent params", MethodTurnStart, ``, []string{"commandId", "input", "sessionId"}},
		{"null params", MethodTurnStart, `null`, []string{""}},
		{"closed enum unknown value", MethodTurnStart, turnStart(`,"ifBusy":"later"`), []string{"ifBusy"}},
		{"closed enum reasoningEffort", MethodTurnStart, turnStart(`,"reasoningEffort":"extreme"`), []string{"reasoningEffort"}},
		{"unknown input part type", MethodTurnStart, `{"commandId":"` + testCommand + `","sessionId":"s","input":[{"type":"text","text":"a"},{"type":"audio"}]}`, []string{"input.1.type"}},
		{"empty input", MethodTurnStart, `{"commandId":"` + testCommand + `","sessionId":"s","input":[]}`, []string{"input"}},
		{"image width without height", MethodTurnStart, `{"commandId":"` + testCommand + `","sessionId":"s","input":[{"type":"image","base64Data":"AA==","mediaType":"image/png","width":2}]}`, []string{"input.0.height"}},
		{"maxAttempts 0", MethodTurnStart, turnStart(`,"retry":{"maxAttempts":0}`), []string{"retry.maxAttempts"}},
		{"maxAttempts 17", MethodTurnStart, turnStart(`,"retry":{"maxAttempts":17}`), []string{"retry.maxAttempts"}},
		{"maxAttempts 2.5", MethodTurnStart, turnStart(`,"retry":{"maxAttempts":2.5}`), []string{"retry.maxAttempts"}},
		{"maxAttempts string", MethodTurnStart, turnStart(`,"retry":{"maxAttempts":"3"}`), []string{"retry.maxAttempts"}},
		{"maxAttempts 3.0 is an integer", MethodTurnStart, turnStart(`,"retry":{"maxAttempts":3.0}`), nil},
		{"growMaxTokens not boolean", MethodTurnStart, turnStart(`,"retry":{"growMaxTokens":"yes"}`), []string{"retry.growMaxTokens"}},
		{"maxTokens 0", MethodTurnStart, turnStart(`,"maxTokens":0`), []string{"maxTokens"}},
		{"responseSchema not object", MethodTurnStart, turnStart(`,"responseSchema":"json"`), []string{"responseSchema"}},
		{"several errors at once", MethodTurnStart, `{"commandId":"` + testCommand + `","input":[{"type":"x"}],"retry":{"maxAttempts":0}}`, []string{"input.0.type", "retry.maxAttempts", "sessionId"}},

		{"initialize", MethodInitialize, `{"clientInfo":{"name":"conformance","version":"0.0.0"}}`, nil},
		{"initialize bad client name", MethodInitialize, `{"clientInfo":{"name":"Bad Name","version":"1"}}`, []string{"clientInfo.name"}},
		{"initialized without params", NotifyInitialized, ``, nil},
		{"session/start", MethodSessionStart, `{"commandId":"` + testCommand + `","providerId":null,"workspaceRoot":"/w"}`, nil},
		{"session/start with mcpServers", MethodSessionStart, `{"commandId":"` + testCommand + `","config":{"mcpServers":{"a":{"transport":"stdio","command":"x"},"b":{"transport":"streamableHttp","url":"https://h/mcp","headers":{"A":"b"},"mode":"optional"}},"later":1}}`, nil},
		{"session mcp unknown transport", MethodSessionStart, `{"commandId":"` + testCommand + `","config":{"mcpServers":{"a":{"transport":"grpc","url":"https://h"}}}}`, []string{"config.mcpServers.a.transport"}},
		{"session mcp http without url", MethodSessionStart, `{"commandId":"` + testCommand + `","config":{"mcpServers":{"a":{"transport":"streamableHttp"}}}}`, []string{"config.mcpServers.a.url"}},
		{"session mcp header not a string", MethodSessionStart, `{"commandId":"` + testCommand + `","config":{"mcpServers":{"a":{"transport":"streamableHttp","url":"https://h","headers":{"A":1}}}}}`, []string{"config.mcpServers.a.headers.A"}},
		{"session mcp bad mode", MethodSessionStart, `{"commandId":"` + testCommand + `","config":{"mcpServers":{"a":{"transport":"stdio","command":"x","mode":"sometimes"}}}}`, []string{"config.mcpServers.a.mode"}},
		{"item/readOutput", MethodItemReadOutput, `{"sessionId":"s","itemId":"i","outputRef":"o","offsetBytes":0,"lengthBytes":10}`, nil},
		{"item/readOutput without outputRef", MethodItemReadOutput, `{"sessionId":"s","itemId":"i"}`, []string{"outputRef"}},
		{"session/resume bad history", MethodSessionResume, `{"commandId":"` + testCommand + `","sessionId":"s","history":"all"}`, []string{"history"}},
		{"session/resume null cursor", MethodSessionResume, `{"commandId":"` + testCommand + `","sessionId":"s","cursor":null}`, nil},
		{"session/list empty", MethodSessionList, `{}`, nil},
		{"session/list limit 201", MethodSessionList, `{"limit":201}`, []string{"limit"}},
		{"session/list limit 0", MethodSessionList, `{"limit":0}`, []string{"limit"}},
		{"view/page limit 0", MethodViewPage, `{"sessionId":"s","limit":0}`, []string{"limit"}},
		{"view/page limit 1001", MethodViewPage, `{"sessionId":"s","limit":1001}`, []string{"limit"}},
		{"view/page bad direction", MethodViewPage, `{"sessionId":"s","limit":10,"direction":"sideways"}`, []string{"direction"}},
		{"view/page open anchor", MethodViewPage, `{"sessionId":"s","limit":10,"anchor":"somethingNew"}`, nil},
		{"turn/unqueue needs turnId", MethodTurnUnqueue, `{"commandId":"` + testCommand + `","sessionId":"s"}`, []string{"turnId"}},
		{"turn/interrupt", MethodTurnInterrupt, `{"commandId":"` + testCommand + `","sessionId":"s","retract":true}`, nil},

		{"open enum unknown terminal", NotifyTurnCompleted, `{"sessionId":"s","viewCursor":"v:s:9","sourceRange":` + testSR + `,"turnId":"t","terminal":"somethingNew"}`, nil},
		{"turn/completed with attempts", NotifyTurnCompleted, `{"sessionId":"s","viewCursor":"v:s:9","sourceRange":` + testSR + `,"turnId":"t","terminal":"completed","attempts":{"count":2,"outputTokens":10,"usageComplete":false,"structuredOutput":"native"}}`, nil},
		{"attempts missing usageComplete", NotifyTurnCompleted, `{"sessionId":"s","viewCursor":"v:s:9","sourceRange":` + testSR + `,"turnId":"t","terminal":"completed","attempts":{"count":2,"outputTokens":10}}`, []string{"attempts.usageComplete"}},
		{"turn/completed sourceRange incomplete", NotifyTurnCompleted, `{"sessionId":"s","viewCursor":"v:s:9","sourceRange":{"stream":{"id":"s","kind":"session"},"first":{"id":"e","sequence":"1"}},"turnId":"t","terminal":"failed"}`, []string{"sourceRange.first.sequence", "sourceRange.last"}},
		{"modelRetryScheduled", NotifyTurnModelRetryScheduled, `{"sessionId":"s","viewCursor":"v:s:5","sourceRange":` + testSR + `,"turnId":"t","attempt":1,"nextAttempt":2,"maxAttempts":3,"retryDelayMs":500,"system":"openai","errorKind":"rateLimited","httpStatus":429}`, nil},
		{"modelRetryScheduled missing delay", NotifyTurnModelRetryScheduled, `{"sessionId":"s","viewCursor":"v:s:5","sourceRange":` + testSR + `,"turnId":"t","attempt":1,"nextAttempt":2,"maxAttempts":3}`, []string{"retryDelayMs"}},
		{"retryScheduled needs reason", NotifyTurnRetryScheduled, `{"sessionId":"s","viewCursor":"v:s:5","sourceRange":` + testSR + `,"turnId":"t","attempt":1,"nextAttempt":2,"maxAttempts":3,"retryDelayMs":0}`, []string{"reason"}},
		{"retryScheduled empty reason", NotifyTurnRetryScheduled, `{"sessionId":"s","viewCursor":"v:s:5","sourceRange":` + testSR + `,"turnId":"t","attempt":1,"nextAttempt":2,"maxAttempts":3,"retryDelayMs":0,"reason":""}`, []string{"reason"}},
		{"unknown method", "turn/steer", `{}`, []string{""}},
		{"not JSON", MethodTurnStart, `{"commandId":`, []string{""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := v.Params(tt.method, json.RawMessage(tt.params))
			if got := fields(errs); !slices.Equal(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
				t.Errorf("Params(%s) fields = %q, want %q; errors: %v", tt.method, got, tt.want, errs)
			}
			for _, e := range errs {
				if e.Message == "" {
					t.Errorf("error at %q has no message", e.Field)
				}
			}
		})
	}
}

func TestMessages(t *testing.T) {
	v := newTestValidator(t)
	base := `{"commandId":"` + testCommand + `","sessionId":"s","input":[{"type":"text","text":"hi"}],`
	for _, tt := range []struct{ extra, want string }{
		{`"retry":{"maxAttempts":0}`, "retry.maxAttempts: must be >= 1"},
		{`"retry":{"maxAttempts":17}`, "retry.maxAttempts: must be <= 16"},
		{`"retry":{"maxAttempts":2.5}`, "retry.maxAttempts: must be integer, not number"},
		{`"retry":{"maxAttempts":"3"}`, "retry.maxAttempts: must be integer, not string"},
		{`"ifBusy":"later"`, `ifBusy: "later" is not one of queue, steer, replace`},
	} {
		errs := v.Params(MethodTurnStart, json.RawMessage(base+tt.extra+`}`))
		if len(errs) != 1 || errs[0].Error() != tt.want {
			t.Errorf("%s: got %v, want [%s]", tt.extra, errs, tt.want)
		}
	}
	errs := v.Params(MethodTurnStart, json.RawMessage(`{"sessionId":"s","input":[{"type":"text"}]}`))
	if len(errs) != 1 || errs[0] != (FieldError{"commandId", "required"}) {
		t.Errorf("missing commandId: got %v", errs)
	}
	// A required-nullable member of the wrong type gets one message naming
	// both accepted types, not one per anyOf branch.
	errs = v.Def("SessionHistory", json.RawMessage(`{"items":null,"mode":"none","snapshot":"x"}`))
	if len(errs) != 1 || errs[0].Error() != "snapshot: must be object or null, not string" {
		t.Errorf("snapshot of wrong type: got %v", errs)
	}
	// When a branch got past the type check, its own errors are reported.
	errs = v.Def("SessionHistory", json.RawMessage(`{"items":[{"itemId":"i","kind":"agentMessage","status":"completed"}],"mode":"inline","snapshot":null}`))
	if got := fields(errs); !slices.Equal(got, []string{"items.0.revision"}) {
		t.Errorf("item without revision: got %v", errs)
	}
}

func TestResultAndDef(t *testing.T) {
	v := newTestValidator(t)
	ack := `{"commandId":"` + testCommand + `","disposition":"started","startedNewTurn":true,"status":"accepted","turnId":"` + testCommand + `"}`
	if errs := v.Result(MethodTurnStart, json.RawMessage(ack)); errs != nil {
		t.Errorf("turn/start ack: %v", errs)
	}
	if got := fields(v.Result(MethodTurnStart, json.RawMessage(`{"commandId":"`+testCommand+`","status":"accepted"}`))); !slices.Equal(got, []string{"disposition", "startedNewTurn", "turnId"}) {
		t.Errorf("short turn/start ack: fields %q", got)
	}
	if errs := v.Result(MethodViewUnsubscribe, json.RawMessage(`{}`)); errs != nil {
		t.Errorf("view/unsubscribe {}: %v", errs)
	}
	if errs := v.Result(NotifyTurnStarted, json.RawMessage(`{}`)); len(errs) != 1 {
		t.Errorf("Result of a notification: %v", errs)
	}
	if errs := v.Def("NoSuchType", json.RawMessage(`{}`)); len(errs) != 1 {
		t.Errorf("Def of unknown name: %v", errs)
	}
	idle := `{"activeTurnId":null,"createdAt":"2026-01-01T00:00:00Z","forkedFrom":null,"modelId":null,"path":"/p","providerId":null,"sessionId":"s","status":"idle","turnCount":0,"updatedAt":"2026-01-01T00:00:00Z","workspaceRoot":null}`
	if errs := v.Def("Session", json.RawMessage(idle)); errs != nil {
		t.Errorf("idle session: %v", errs)
	}
	// activeTurnId is required-nullable: omitting it is an error, unlike null.
	if got := fields(v.Def("Session", json.RawMessage(strings.Replace(idle, `"activeTurnId":null,`, "", 1)))); !slices.Equal(got, []string{"activeTurnId"}) {
		t.Errorf("session without activeTurnId: fields %q", got)
	}
}

// frameStep is one frame fed to a FrameChecker, with the fields of the
// errors expected for it.
type frameStep struct {
	frame string
	want  []string
}

func TestCheck(t *testing.T) {
	approvalRequest := `{"sessionId":"s","viewCursor":"v:s:5","sourceRange":` + testSR + `,"approvalId":"a","itemId":"i","taskId":"i","toolCallId":"c","toolName":"t__x","rawArgs":"{}","turnId":"t",` +
		`"judgeEscalated":false,"protectedWrite":false,"subject":{"kind":"tool","toolName":"t__x"},"currentRequirementId":{"approvalId":"a","sourceIndex":0},` +
		`"availableChoices":[{"choiceId":"approve","decision":"approved","label":"Approve","scope":"once"}]}`
	tsParams := `{"commandId":"` + testCommand + `","sessionId":"` + testSession + `","input":[{"type":"text","text":"hi"}]}`
	ack := `{"commandId":"` + testCommand + `","disposition":"started","startedNewTurn":true,"status":"accepted","turnId":"` + testCommand + `"}`
	tests := []struct {
		name  string
		steps []frameStep
	}{
		{"a server request and the client's receipt", []frameStep{
			{`{"jsonrpc":"2.0","id":"mspd-1","method":"approval/request","params":` + approvalRequest + `}`, nil},
			{`{"jsonrpc":"2.0","id":"mspd-1","result":{}}`, nil},
			{`{"jsonrpc":"2.0","id":"mspd-2","method":"approval/request","params":{"sessionId":"s"}}`, []string{"params.approvalId", "params.availableChoices", "params.currentRequirementId",
				"params.itemId", "params.judgeEscalated", "params.protectedWrite", "params.rawArgs", "params.sourceRange", "params.subject", "params.taskId",
				"params.toolCallId", "params.toolName", "params.turnId", "params.viewCursor"}},
			{`{"jsonrpc":"2.0","id":"mspd-2","result":[]}`, []string{"result"}},
		}},
		{"request and its response", []frameStep{
			{`{"jsonrpc":"2.0","id":3,"method":"turn/start","params":` + tsParams + `}`, nil},
			{`{"jsonrpc":"2.0","id":3,"result":` + ack + `}`, nil},
		}},
		{"response result checked against its request's method", []frameStep{
			{`{"jsonrpc":"2.0","id":"a1","method":"turn/start","params":` + tsParams + `}`, nil},
			{`{"jsonrpc":"2.0","id":"a1","result":{"viewCursor":"v:1"}}`, []string{"result.commandId", "result.disposition", "result.startedNewTurn", "result.status", "result.turnId"}},
		}},
		{"ids 1 and \"1\" are different", []frameStep{
			{`{"jsonrpc":"2.0","id":1,"method":"view/subscribe","params":{"sessionId":"s"}}`, nil},
			{`{"jsonrpc":"2.0","id":"1","result":{}}`, nil},
			{`{"jsonrpc":"2.0","id":1,"result":{}}`, []string{"result.viewCursor"}},
		}},
		{"a request id is forgotten once answered", []frameStep{
			{`{"jsonrpc":"2.0","id":5,"method":"view/unsubscribe","params":{"sessionId":"s"}}`, nil},
			{`{"jsonrpc":"2.0","id":5,"result":{}}`, nil},
			{`{"jsonrpc":"2.0","id":5,"result":{"anything":1}}`, nil},
		}},
		{"unknown response id: result only has to be an object", []frameStep{
			{`{"jsonrpc":"2.0","id":99,"result":{"x":1}}`, nil},
			{`{"jsonrpc":"2.0","id":99,"result":[]}`, []string{"result"}},
		}},
		{"request params invalid", []frameStep{
			{`{"jsonrpc":"2.0","id":4,"method":"turn/start","params":{"sessionId":"s","input":[{"type":"text"}],"ifBusy":"later"}}`, []string{"params.commandId", "params.ifBusy"}},
		}},
		{"request without params", []frameStep{
			{`{"jsonrpc":"2.0","id":4,"method":"session/list"}`, nil},
			{`{"jsonrpc":"2.0","id":5,"method":"turn/cancel"}`, []string{"params.commandId", "params.sessionId"}},
		}},
		{"params must be an object, never null", []frameStep{
			{`{"jsonrpc":"2.0","id":4,"method":"session/list","params":null}`, []string{"params"}},
		}},
		{"unknown request method", []frameStep{
			{`{"jsonrpc":"2.0","id":4,"method":"turn/steer","params":{}}`, []string{"method"}},
		}},
		{"bad id type", []frameStep{
			{`{"jsonrpc":"2.0","id":true,"method":"session/list"}`, []string{"id"}},
		}},
		{"notification", []frameStep{
			{`{"jsonrpc":"2.0","method":"initialized"}`, nil},
			{`{"jsonrpc":"2.0","method":"view/gap","params":{"sessionId":"s","after":"v:1","next":"v:5"},"emittedAtMs":1754590940000}`, nil},
		}},
		{"notification emittedAtMs must be an integer", []frameStep{
			{`{"jsonrpc":"2.0","method":"view/gap","params":{"sessionId":"s","after":"v:1","next":"v:5"},"emittedAtMs":"now"}`, []string{"emittedAtMs"}},
		}},
		{"notification params invalid", []frameStep{
			{`{"jsonrpc":"2.0","method":"turn/started","params":{"sessionId":"s","viewCursor":"v:1","turnId":"t"}}`, []string{"params.commandId", "params.sourceRange"}},
		}},
		{"unknown notification", []frameStep{
			{`{"jsonrpc":"2.0","method":"item/retracted","params":{}}`, []string{"method"}},
		}},
		{"item/delta", []frameStep{
			{`{"jsonrpc":"2.0","method":"item/delta","params":{"sessionId":"s","viewCursor":"v:s:3.1","itemId":"i","field":"text","delta":"Hel"},"emittedAtMs":1}`, nil},
		}},
		{"item/delta with sourceRange", []frameStep{
			{`{"jsonrpc":"2.0","method":"item/delta","params":{"sessionId":"s","viewCursor":"v:s:3.1","itemId":"i","delta":"Hel","sourceRange":` + testSR + `},"emittedAtMs":1}`, []string{"params.sourceRange"}},
		}},
		{"error response", []frameStep{
			{`{"jsonrpc":"2.0","id":9,"error":{"code":-32011,"message":"unknown cursor anchor","data":{"kind":"notFound","reason":"missingAnchor","sessionId":"s"}}}`, nil},
			{`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error","data":{"kind":"parseError"}}}`, nil},
			{`{"jsonrpc":"2.0","id":9,"error":{"code":-32040,"message":"truncated","data":{"kind":"viewTruncated","earliestCursor":null}}}`, nil},
			{`{"jsonrpc":"2.0","id":9,"error":{"code":-32001,"message":"busy","data":{"kind":"somethingNew","retryable":true}}}`, nil},
		}},
		{"error without data", []frameStep{
			{`{"jsonrpc":"2.0","id":9,"error":{"code":-32602,"message":"bad"}}`, []string{"error.data"}},
		}},
		{"error without data.kind", []frameStep{
			{`{"jsonrpc":"2.0","id":9,"error":{"code":-32602,"message":"bad","data":{"reason":"x"}}}`, []string{"error.data.kind"}},
		}},
		{"error with bad code and message", []frameStep{
			{`{"jsonrpc":"2.0","id":9,"error":{"code":"E1","message":5,"data":{"kind":"internal"}}}`, []string{"error.code", "error.message"}},
		}},
		{"error response answers a remembered request", []frameStep{
			{`{"jsonrpc":"2.0","id":7,"method":"view/page","params":{"sessionId":"s","limit":10}}`, nil},
			{`{"jsonrpc":"2.0","id":7,"error":{"code":-32011,"message":"unknown cursor anchor","data":{"kind":"notFound"}}}`, nil},
		}},
		{"response with both result and error", []frameStep{
			{`{"jsonrpc":"2.0","id":9,"result":{},"error":{"code":1,"message":"m","data":{"kind":"internal"}}}`, []string{""}},
		}},
		{"response with neither", []frameStep{
			{`{"jsonrpc":"2.0","id":9}`, []string{""}},
		}},
		{"success response id null", []frameStep{
			{`{"jsonrpc":"2.0","id":null,"result":{}}`, []string{"id"}},
		}},
		{"result must be an object", []frameStep{
			{`{"jsonrpc":"2.0","id":9,"result":"ok"}`, []string{"result"}},
		}},
		{"missing jsonrpc", []frameStep{
			{`{"id":1,"method":"session/list"}`, []string{"jsonrpc"}},
		}},
		{"wrong jsonrpc", []frameStep{
			{`{"jsonrpc":"1.0","method":"initialized"}`, []string{"jsonrpc"}},
		}},
		{"raw newline", []frameStep{
			{"{\"jsonrpc\":\"2.0\",\n\"method\":\"initialized\"}", []string{""}},
		}},
		{"escaped newline inside a string is fine", []frameStep{
			{`{"jsonrpc":"2.0","method":"item/delta","params":{"sessionId":"s","viewCursor":"v:1","itemId":"i","delta":"line\nnext"}}`, nil},
		}},
		{"not an object", []frameStep{
			{`[{"jsonrpc":"2.0","method":"initialized"}]`, []string{""}},
		}},
		{"two values", []frameStep{
			{`{"jsonrpc":"2.0","method":"initialized"}{"jsonrpc":"2.0","method":"initialized"}`, []string{""}},
		}},
		{"not JSON", []frameStep{
			{`{"jsonrpc":"2.0",`, []string{""}},
		}},
		{"neither method nor id", []frameStep{
			{`{"jsonrpc":"2.0","result":{}}`, []string{""}},
		}},
		{"unknown top-level members tolerated", []frameStep{
			{`{"jsonrpc":"2.0","id":1,"method":"session/list","params":{"futureOptionalField":1},"trace":{"traceparent":"00-x"},"extra":true}`, nil},
		}},
	}
	v := newTestValidator(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := v.NewFrameChecker()
			for i, s := range tt.steps {
				errs := c.Check([]byte(s.frame))
				if got := fields(errs); !slices.Equal(got, s.want) && !(len(got) == 0 && len(s.want) == 0) {
					t.Errorf("step %d: fields = %q, want %q; errors: %v\nframe: %s", i, got, s.want, errs, s.frame)
				}
			}
		})
	}
}

// transcriptFrame is one line of an upstream transcript.
type transcriptFrame struct {
	Dir string `json:"dir"`
	Raw string `json:"raw"`
}

func readTranscript(t *testing.T, path string) []transcriptFrame {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var frames []transcriptFrame
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var tf transcriptFrame
		if err := json.Unmarshal(sc.Bytes(), &tf); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		frames = append(frames, tf)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return frames
}

// TestUpstreamTranscripts checks that every frame of the upstream
// transcripts kept in testdata/transcripts validates. They use only methods
// mspd serves; members mspd does not send (a toolCall item's tool and args,
// a session's approvalMode) must be tolerated as unknown members.
func TestUpstreamTranscripts(t *testing.T) {
	v := newTestValidator(t)
	paths, err := filepath.Glob("testdata/transcripts/*.ndjson")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no transcripts in testdata/transcripts (err %v)", err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			c := v.NewFrameChecker()
			frames := readTranscript(t, path)
			methods := map[string]int{}
			for i, f := range frames {
				if errs := c.Check([]byte(f.Raw)); errs != nil {
					t.Errorf("frame %d (%s): %v\n%s", i, f.Dir, errs, f.Raw)
				}
				var env struct{ Method string }
				_ = json.Unmarshal([]byte(f.Raw), &env)
				methods[env.Method]++
			}
			t.Logf("%d frames, methods %v", len(frames), methods)
		})
	}
}

// TestTranscriptsAreVerbatim guards the copies in testdata/transcripts: when
// the upstream reference directory is present they must match it byte for
// byte. (CI checkouts without it still validate the copies above.)
func TestTranscriptsAreVerbatim(t *testing.T) {
	paths, _ := filepath.Glob("testdata/transcripts/*.ndjson")
	for _, path := range paths {
		ref := filepath.Join("..", "..", "..", "shared", "reference", "transcripts", filepath.Base(path))
		want, err := os.ReadFile(ref)
		if err != nil {
			t.Logf("%s not available; copy not compared", ref)
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s differs from %s", path, ref)
		}
	}
}

// TestProviderFailureTranscript pins the facts of the provider-failure-turn
// transcript that matter to mspd: a provider failure ends the turn as a
// failed turn/completed carrying error.kind modelError, not as a JSON-RPC
// error, and the next turn/start on the session works normally.
func TestProviderFailureTranscript(t *testing.T) {
	frames := readTranscript(t, "testdata/transcripts/provider-failure-turn.transcript.ndjson")
	var failed, errorResponses, completed int
	for _, f := range frames {
		var env struct {
			Method string          `json:"method"`
			Error  json.RawMessage `json:"error"`
			Params json.RawMessage `json:"params"`
		}
		if err := json.Unmarshal([]byte(f.Raw), &env); err != nil {
			t.Fatal(err)
		}
		if env.Error != nil {
			errorResponses++
		}
		if env.Method != NotifyTurnCompleted {
			continue
		}
		var p TurnCompletedParams
		if err := json.Unmarshal(env.Params, &p); err != nil {
			t.Fatal(err)
		}
		switch p.Terminal {
		case TerminalFailed:
			failed++
			if p.Error == nil || p.Error.Kind != TurnErrorModel {
				t.Errorf("failed terminal without a modelError: %+v", p.Error)
			}
		case TerminalCompleted:
			completed++
			if p.Error != nil {
				t.Errorf("completed terminal with an error: %+v", p.Error)
			}
		}
	}
	if failed != 1 || completed != 1 || errorResponses != 0 {
		t.Errorf("failed=%d completed=%d errorResponses=%d, want 1, 1, 0", failed, completed, errorResponses)
	}
}

func BenchmarkValidateTurnStart(b *testing.B) {
	v := newTestValidator(b)
	params := json.RawMessage(`{"commandId":"` + testCommand + `","sessionId":"` + testSession + `","input":[{"type":"text","text":"Run the agent test suite and summarize failures"}],"ifBusy":"queue","retry":{"maxAttempts":3,"growMaxTokens":true},"maxTokens":1024}`)
	if errs := v.Params(MethodTurnStart, params); errs != nil {
		b.Fatal(errs)
	}
	b.ReportAllocs()
	for b.Loop() {
		v.Params(MethodTurnStart, params)
	}
}

func BenchmarkCheckDeltaFrame(b *testing.B) {
	v := newTestValidator(b)
	c := v.NewFrameChecker()
	frame := []byte(`{"jsonrpc":"2.0","method":"item/delta","params":{"sessionId":"` + testSession + `","viewCursor":"v:` + testSession + `:8.3","itemId":"0198f0ac-4242-7000-8000-000000000042","field":"text","delta":"All 214 tests pass"},"emittedAtMs":1754590941100}`)
	if errs := c.Check(frame); errs != nil {
		b.Fatal(errs)
	}
	b.ReportAllocs()
	for b.Loop() {
		c.Check(frame)
	}
}
