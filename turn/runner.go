package turn

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"mspd/modelretry"
	"mspd/observe"
	"mspd/provider"
	"mspd/schema/msp"
)

// Config configures a Runner.
type Config struct {
	// Model answers every attempt.
	Model provider.Model
	// Engine makes the retry decisions; its Clock paces backoffs and dates
	// events.
	Engine *modelretry.Engine
	// Policy is the host's retry policy; its MaxAttempts is the ceiling a
	// turn's own retry.maxAttempts is clamped to.
	Policy modelretry.Policy
	// DefaultMaxTokens is each attempt's output bound when the turn names
	// none (default 1024).
	DefaultMaxTokens int
	// ModelMaxTokens is the model's largest output: no request asks for
	// more, and truncation growth stops there (default 32768).
	ModelMaxTokens int
	// Metrics receives each attempt's and turn's counts and timings; nil
	// records none.
	Metrics *observe.Metrics
	// Tracer, when set, traces each turn and its attempts (see
	// observe.Tracer); nil makes no spans.
	Tracer trace.Tracer
	// Logger receives a line per scheduled retry and per failed turn, with
	// the turn's trace id when tracing; nil logs nothing.
	Logger *slog.Logger
	// MaxSteps bounds a turn's model calls: a model that still asks for
	// tools at the last one ends the turn with stepLimit (default 24).
	MaxSteps int
	// ToolTimeout bounds each tool call (default 120 s).
	ToolTimeout time.Duration
	// ApprovalTimeout bounds how long a call waits for its approval, from
	// when it was asked for, before it is resolved timedOut (0: no bound).
	ApprovalTimeout time.Duration
	// SameFamily tells whether tool calls made through the configured
	// provider providerID reach this runner's model in its own API's
	// shapes; the calls of another family's model are sent as text
	// (provider.ForeignToolsAsText). Nil sends every call as a call.
	SameFamily func(providerID string) bool
	// Models tells what each model of the runner's provider takes and
	// the operator's instructions for it (the catalog's Provider.Info);
	// nil: every model takes images and tools, and has none.
	Models func(model string) provider.ModelInfo
	// Breaker is the circuit breaker of this runner's provider, shared by
	// every runner driving it; nil: none.
	Breaker *modelretry.Breaker
	// Fallback are the providers that answer, in order, a step this
	// runner's provider cannot (see Fallback); nil: none.
	Fallback []Fallback
}

// Runner runs turns against one model. It is safe for concurrent use.
type Runner struct {
	cfg   Config
	clock modelretry.Clock
}

// NewRunner returns a runner; cfg.Model and cfg.Engine are required.
func NewRunner(cfg Config) *Runner {
	if cfg.DefaultMaxTokens <= 0 {
		cfg.DefaultMaxTokens = 1024
	}
	if cfg.ModelMaxTokens <= 0 {
		cfg.ModelMaxTokens = 32768
	}
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = 24
	}
	if cfg.ToolTimeout <= 0 {
		cfg.ToolTimeout = 120 * time.Second
	}
	clock := cfg.Engine.Clock
	if clock == nil {
		clock = modelretry.SystemClock()
	}
	return &Runner{cfg: cfg, clock: clock}
}

// Run runs one turn to its terminal. A turn is a loop of steps: a model
// call, then the tool calls it asked for, then the next model call with
// their results, until the model answers. Every provider request of a step
// is one attempt of that step's modelretry call, so model-layer retries (a
// failure before output) and turn-layer retries (output rejected:
// truncated, failing the response schema, calling a tool wrongly, or cut
// after it began) share one counter and one bound per step, and the
// turn's attempts count every request of every step. Each retry's notice
// is emitted before its backoff; cancelling ctx ends the turn "cancelled"
// without another request.
func (r *Runner) Run(ctx context.Context, spec Spec, sink Sink) Outcome {
	t := &run{r: r, spec: spec, sink: sink, start: r.clock.Now(), usageComplete: true}
	ctx = t.obs.startTurn(ctx, &r.cfg, spec)
	// Events must land even after ctx is cancelled: the closing item and
	// the terminal are written on behalf of the cancellation.
	t.emitCtx = context.WithoutCancel(ctx)
	o := t.run(ctx)
	t.obs.endTurn(o, t.attempts)
	o.Trace = t.obs.spanContext()
	return o
}

// run is the state of one turn.
type run struct {
	r       *Runner
	spec    Spec
	sink    Sink
	emitCtx context.Context
	start   time.Time

	firstToken    time.Time
	usage         msp.TokenUsage
	hasUsage      bool
	outputTokens  int64
	usageComplete bool
	structured    string
	attempts      int                // provider requests of the turn so far, every step's
	step          int                // 0-based: the model call under way
	stepBase      int                // the requests of the steps before this one
	messages      []provider.Message // what the turn added to the history so far
	ended         *Outcome           // a terminal decided before the first request
	checkpoint    Checkpoint         // the last retry notice's
	chain         modelretry.Chain   // how a step's requests are shared along the fallback chain
	hop           hop                // the chain's entry the step is on
	held          []Event            // the attempt's closing events, not yet written
	obs           telemetry
	outputs       sync.Map    // item id → ToolOutput: whole outputs of closed calls, until emitCall writes them
	window        windowState // the context window: its pressure, what may be compacted (compact.go)
}

func (t *run) run(ctx context.Context) Outcome {
	policy := t.r.cfg.Policy
	// Each entry of the chain gets the host's attempts; the step as a
	// whole, the turn's own maxAttempts when it gave one (RFC 0248 §B.1).
	t.chain = modelretry.NewChain(t.entries(), policy.MaxAttempts)
	t.hop = t.entryAt(0)
	t.initWindow() // the session's model's window: the hop's
	if rp := t.spec.Retry; rp != nil {
		if rp.MaxAttempts != nil {
			total := policy.WithMaxAttempts(*rp.MaxAttempts, t.chain.Ceiling())
			if err := total.Validate(); err != nil {
				return t.fail(msp.TurnErrorConfig, fmt.Sprintf("retry policy: %v", err), false)
			}
			t.chain.Total = total.MaxAttempts
		}
		if rp.GrowMaxTokens != nil {
			policy = policy.WithGrowMaxTokens(*rp.GrowMaxTokens)
		}
	}
	var schema *Schema
	var err error
	if len(t.spec.ResponseSchema) > 0 {
		if schema, err = CompileSchema(t.spec.ResponseSchema); err != nil {
			return t.fail(msp.TurnErrorConfig, err.Error(), false)
		}
	}
	maxTokens := t.spec.MaxTokens
	if maxTokens <= 0 {
		maxTokens = t.r.cfg.DefaultMaxTokens
	}
	var call *modelretry.Call
	if res := t.spec.Resume; res != nil {
		if res.MaxTokens > 0 {
			maxTokens = res.MaxTokens
		}
		call, err = t.resume(ctx, policy, min(maxTokens, t.hop.cfg.ModelMaxTokens))
	} else {
		call, err = t.startEntry(policy)
	}
	if err != nil {
		return t.fail(msp.TurnErrorConfig, fmt.Sprintf("retry policy: %v", err), false)
	}
	// No request asks for more than the model can give: the provider would
	// refuse it outright.
	maxTokens = min(maxTokens, t.hop.cfg.ModelMaxTokens)
	if t.ended != nil {
		return *t.ended
	}
	if o := t.refuseImages(); o != nil && t.spec.Compact == "" {
		return *o
	}
	if call == nil || ctx.Err() != nil {
		return t.interrupted(ctx, false, maxTokens)
	}
	if t.spec.Compact != "" {
		return t.compactTurn(ctx, call, policy, maxTokens)
	}
	maxSteps := t.r.cfg.MaxSteps
	if t.spec.MaxSteps > 0 {
		maxSteps = min(maxSteps, t.spec.MaxSteps)
	}
	for {
		res, end := t.modelCall(ctx, call, policy, &maxTokens, schema)
		if end != nil {
			return *end
		}
		if len(res.calls) == 0 {
			return t.completed(res.text)
		}
		if t.step+1 >= maxSteps {
			return t.fail(msp.TurnErrorStepLimit, fmt.Sprintf("the model still asked for tools after %d steps, this turn's limit", maxSteps), false)
		}
		if end := t.toolStep(ctx, res, maxTokens); end != nil {
			return *end
		}
		if call, err = t.startEntry(policy); err != nil {
			return t.fail(msp.TurnErrorConfig, fmt.Sprintf("retry policy: %v", err), false)
		}
	}
}

// modelCall runs one step's model call to an answer it keeps, retrying as
// the policy allows. It returns the kept attempt's result, or the turn's
// end when the call ends it (failed, cancelled, stopped with the host).
func (t *run) modelCall(ctx context.Context, call *modelretry.Call, policy modelretry.Policy, maxTokensAt *int, schema *Schema) (attemptResult, *Outcome) {
	maxTokens := *maxTokensAt
	end := func(o Outcome) (attemptResult, *Outcome) {
		// A request admitted and never sent, or cut off, tells the
		// provider's breaker nothing, but frees the probe it may hold.
		t.report(modelretry.HealthUnknown)
		*maxTokensAt = maxTokens
		return attemptResult{}, &o
	}
	for {
		if o := t.compactBefore(ctx, policy, maxTokens); o != nil {
			return end(*o)
		}
		var err error
		if call, err = t.admit(call, policy, &maxTokens); err != nil {
			return end(t.fail(msp.TurnErrorLog, fmt.Sprintf("writing the session log: %v", err), true))
		}
		// Built after admit, which may have moved the step to a fallback
		// whose model takes other things.
		msgs, err := t.request(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return end(t.interrupted(ctx, false, maxTokens))
			}
			return end(t.fail(msp.TurnErrorLog, fmt.Sprintf("reading the session's images: %v", err), true))
		}
		if err := t.beginRetry(); err != nil {
			return end(t.fail(msp.TurnErrorLog, fmt.Sprintf("writing the session log: %v", err), true))
		}
		a, err := call.Begin(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return end(t.interrupted(ctx, false, maxTokens))
			}
			return end(t.fail(msp.TurnErrorModel, fmt.Sprintf("no attempt left: %v", err), false))
		}
		t.attempts = t.hop.base + a.N()
		res := t.attempt(ctx, t.attempts, maxTokens, schema, msgs)
		msgs = nil // the request's images are not kept through a backoff
		if res.sinkErr != nil {
			// The request reached the provider: it stays counted.
			a.Fail(ctx, modelretry.Failure{Kind: msp.TurnErrorLog})
			return end(t.fail(msp.TurnErrorLog, fmt.Sprintf("writing the session log: %v", res.sinkErr), true))
		}
		if ctx.Err() != nil {
			a.Fail(ctx, modelretry.Failure{Kind: modelretry.KindCancelled})
			return end(t.interrupted(ctx, true, maxTokens))
		}

		var d modelretry.Decision
		var reason string
		switch {
		case res.err != nil && res.text == "":
			// Nothing was committed: a model-layer retry, or, for a prompt
			// too long that compaction shortened, a turn-layer re-run.
			f := t.hop.cfg.Engine.Classify(signal(res.err))
			var stop *Outcome
			if reason, stop = t.compactOnOverflow(ctx, f, policy, maxTokens); stop != nil {
				a.Fail(ctx, f)
				return end(*stop)
			}
			if reason != "" {
				f.Retryable = true
				d = a.Rerun(ctx, f)
				break
			}
			d = a.Fail(ctx, f)
		case res.err != nil:
			// The stream broke after output began: the output is void and
			// the whole request re-runs (a turn-layer retry).
			f := t.hop.cfg.Engine.Classify(signal(res.err))
			f.Retryable = f.Retryable || f.Kind == modelretry.KindStreamInterrupted
			reason = "provider stream disconnected"
			if f.Kind != modelretry.KindStreamInterrupted {
				reason = "provider stream failed: " + msp.FailureWords(f.Kind, f.HTTPStatus)
			}
			d = a.Rerun(ctx, f)
		case res.finish == provider.FinishLength:
			next, grows := modelretry.NextMaxTokens(maxTokens, t.hop.cfg.ModelMaxTokens, policy.GrowMaxTokens)
			f := modelretry.Failure{Kind: modelretry.KindTruncated, Retryable: grows || !policy.GrowMaxTokens,
				Message: fmt.Sprintf("output truncated at %d tokens", maxTokens)}
			reason = fmt.Sprintf("output truncated at %d tokens; retrying with %d", maxTokens, next)
			if next == maxTokens {
				reason = fmt.Sprintf("output truncated at %d tokens; retrying with the same limit", maxTokens)
			}
			d = a.Rerun(ctx, f)
			if d.Retry {
				maxTokens = next
			}
		case res.finish == provider.FinishContentFilter:
			d = a.Fail(ctx, modelretry.Failure{Kind: modelretry.KindContentFilter, Message: "the provider filtered the answer"})
		case res.schemaErr != nil:
			reason = clip("answer does not match the response schema: "+res.schemaErr.Error(), msp.MaxReason)
			d = a.Rerun(ctx, modelretry.Failure{Kind: modelretry.KindSchemaViolation, Retryable: true, Message: res.schemaErr.Error()})
		case res.toolErr != nil:
			reason = clip("invalid tool call: "+res.toolErr.Error(), msp.MaxReason)
			d = a.Rerun(ctx, modelretry.Failure{Kind: modelretry.KindInvalidToolCall, Retryable: true, Message: res.toolErr.Error()})
		default:
			a.Succeed()
			t.report(modelretry.Healthy)
			*maxTokensAt = maxTokens
			return res, nil
		}

		t.report(modelretry.HealthOf(d.Failure))
		t.obs.decided(d)
		if !d.Retry {
			if d.Stop == modelretry.StopCancelled {
				return end(t.interrupted(ctx, true, maxTokens))
			}
			if !modelretry.FailsOver(d) || !t.hasNext() {
				return end(t.failDecision(t.widen(d)))
			}
			if call, err = t.failOver(d, string(d.Stop), policy, &maxTokens); err != nil {
				return end(t.fail(msp.TurnErrorLog, fmt.Sprintf("writing the retry notice: %v", err), true))
			}
			continue
		}
		if t.hop.cfg.Breaker.State() == modelretry.BreakerOpen && t.hasNext() {
			// Others' failures opened the breaker meanwhile: the backoff
			// would be waited out for a provider turns now skip.
			if call, err = t.failOver(d, msp.FallbackCircuitOpen, policy, &maxTokens); err != nil {
				return end(t.fail(msp.TurnErrorLog, fmt.Sprintf("writing the retry notice: %v", err), true))
			}
			continue
		}
		if err := call.Backoff(ctx, t.notice(reason, maxTokens)); err != nil {
			if ctx.Err() != nil {
				return end(t.interrupted(ctx, false, maxTokens))
			}
			return end(t.fail(msp.TurnErrorLog, fmt.Sprintf("writing the retry notice: %v", err), true))
		}
	}
}

// notice returns the Backoff callback that appends a retry's notice, with
// the checkpoint a later process resumes from, before the sleep.
func (t *run) notice(reason string, nextMaxTokens int) func(modelretry.Decision) error {
	return func(d modelretry.Decision) error {
		d = t.widen(d)
		next := t.checkpointAt(t.stepBase+d.Attempt, t.r.clock.Now().Add(d.Delay), nextMaxTokens)
		next.Begun = new(bool)
		t.checkpoint = next
		notice := Event{Method: msp.NotifyTurnModelRetryScheduled, Params: &msp.TurnModelRetryScheduledParams{
			TurnID: t.spec.TurnID, Attempt: d.Attempt, NextAttempt: d.NextAttempt, MaxAttempts: d.MaxAttempts,
			RetryDelayMs: d.Delay.Milliseconds(), System: t.hop.system(), ErrorKind: d.Failure.Kind,
			HTTPStatus: d.Failure.HTTPStatus}}
		if d.Layer == modelretry.LayerTurn {
			notice = Event{Method: msp.NotifyTurnRetryScheduled, Params: &msp.TurnRetryScheduledParams{
				TurnID: t.spec.TurnID, Attempt: d.Attempt, NextAttempt: d.NextAttempt, MaxAttempts: d.MaxAttempts,
				RetryDelayMs: d.Delay.Milliseconds(), Reason: clip(reason, msp.MaxReason)}}
		}
		t.obs.retryScheduled(d)
		if err := t.sink.EmitRetry(t.emitCtx, next, append(t.takeHeld(), notice)); err != nil {
			return err
		}
		t.obs.noticeWritten(notice)
		return nil
	}
}

// beginRetry records, before a retried request is sent, that it is
// about to be: the last notice's checkpoint with Begun set. A first
// request needs no record (a turn without a checkpoint counts it).
func (t *run) beginRetry() error {
	if t.checkpoint.Begun == nil || *t.checkpoint.Begun {
		return nil
	}
	cp := t.checkpoint
	cp.Begun = new(true)
	if err := t.sink.BeginAttempt(t.emitCtx, cp); err != nil {
		return err
	}
	t.checkpoint = cp
	return nil
}

// resume picks up a turn another process lost: its accounting so far, then
// the restart's notice and backoff. It returns a nil call when the turn
// ends or stops here, with the terminal in t.ended when it ends.
func (t *run) resume(ctx context.Context, policy modelretry.Policy, maxTokens int) (*modelretry.Call, error) {
	res := t.spec.Resume
	t.start, t.attempts, t.usageComplete = res.StartedAt, res.Attempts, res.Attempts == 0
	t.step, t.stepBase = res.Step, res.StepBase
	t.resumeRoute(res.Route)
	if res.Usage != nil {
		t.usage, t.hasUsage, t.outputTokens = *res.Usage, true, res.Usage.OutputTokens
	}
	if res.Attempts == res.StepBase {
		// Stopped before its step's first request: the calls the step
		// before asked for are settled, then the step simply starts, that
		// request marked begun first like a retried one, or a process
		// that dies sending it would leave the stop's checkpoint, which
		// counts no request, and the turn could loop.
		if err := t.settleOpenCalls(ctx, res.OpenCalls, res.StoppedBy); err != nil {
			o := t.fail(msp.TurnErrorLog, fmt.Sprintf("writing the session log: %v", err), true)
			t.ended = &o
			return nil, nil
		}
		t.checkpoint = t.checkpointAt(res.Attempts, t.r.clock.Now(), maxTokens)
		t.checkpoint.Begun = new(false)
		return t.startEntry(policy)
	}
	delay := res.Delay
	if delay <= 0 {
		delay = -1 // the policy's backoff
	}
	// No backoff the policy grants is longer; a longer rest says this
	// node's clock is behind the one that wrote the checkpoint.
	delay = min(delay, max(policy.MaxBackoff, policy.MaxServerDelay))
	n := t.allowance()
	call, d, err := t.hop.cfg.Engine.Resume(policy.WithMaxAttempts(n, n), res.Attempts-t.hop.base, delay)
	if err != nil {
		return nil, err
	}
	d = t.widen(d)
	if !d.Retry {
		o := t.fail(msp.TurnErrorHostRestarted, clip(fmt.Sprintf("%s; no attempts left (%d of %d made)", res.Reason, d.Attempt, d.MaxAttempts), 500), true)
		t.ended = &o
		return nil, nil
	}
	if err := call.Backoff(ctx, t.notice(res.Reason, maxTokens)); err != nil && ctx.Err() == nil {
		o := t.fail(msp.TurnErrorLog, fmt.Sprintf("writing the retry notice: %v", err), true)
		t.ended = &o
		return nil, nil
	}
	return call, nil
}

// checkpointAt is a checkpoint of the step under way after attempts
// requests of the turn.
func (t *run) checkpointAt(attempts int, nextAt time.Time, maxTokens int) Checkpoint {
	return Checkpoint{Attempts: attempts, NextAt: nextAt, MaxTokens: maxTokens, Step: t.step, StepBase: t.stepBase,
		Route: t.hop.mark()}
}

// interrupted ends a turn whose context was cancelled between or during
// attempts. A user's stop cancels it; a stopping host (ErrHostStopping)
// leaves it unended, to resume from a checkpoint: lost says the last
// counted attempt was cut off in flight.
func (t *run) interrupted(ctx context.Context, lost bool, maxTokens int) Outcome {
	if !stopping(ctx) {
		return t.cancelled()
	}
	cp := t.checkpointAt(t.attempts, t.r.clock.Now(), maxTokens)
	cp.Stopped, cp.Lost = true, lost
	if !lost && t.checkpoint.Attempts == t.attempts && t.checkpoint.NextAt.After(cp.NextAt) {
		cp.NextAt = t.checkpoint.NextAt // stopped during the backoff it announced
	}
	return Outcome{Stopped: &cp, Held: t.takeHeld()}
}

// stopping tells whether ctx was cancelled by a stopping host.
func stopping(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), ErrHostStopping)
}

// attemptResult is how one provider request went.
type attemptResult struct {
	text      string
	calls     []provider.ToolCall // the tools the answer calls
	finish    string
	err       error // the provider's failure
	schemaErr error // a finished answer failed the response schema
	toolErr   error // the answer called a tool wrongly
	sinkErr   error // the session log refused an event
	reasoning reasoned
}

// attempt sends one request of msgs, streaming its output into a fresh
// agentMessage item opened at the first delta, and closes that item with
// the attempt's fate: completed only for an answer the turn keeps (finished,
// not truncated or filtered, and satisfying schema when there is one).
// Usage the provider reported is accounted (and announced) whatever the
// fate.
func (t *run) attempt(ctx context.Context, n, maxTokens int, schema *Schema, msgs []provider.Message) attemptResult {
	actx, stop := context.WithCancel(t.obs.startAttempt(ctx, n, maxTokens))
	defer stop()
	var res attemptResult
	var text strings.Builder
	var item *msp.Item
	began := t.r.clock.Now()
	req := provider.Request{Model: t.hop.model, Messages: msgs, MaxTokens: maxTokens,
		ResponseSchema: t.spec.ResponseSchema, Attempt: n, Instructions: t.instructions(), Tools: t.tools()}
	rs := t.streamReasoning(n, &req, &res.sinkErr, stop)
	resp, err := t.hop.cfg.Model.Stream(actx, req, func(delta string) {
		if delta == "" || res.sinkErr != nil {
			return
		}
		if item == nil {
			if !rs.answerBegins() {
				return
			}
			if item, res.sinkErr = t.openItem(n); res.sinkErr != nil {
				stop()
				return
			}
			if t.firstToken.IsZero() {
				t.firstToken = t.r.clock.Now()
			}
		}
		text.WriteString(delta)
		t.sink.Delta(item.ItemID, delta)
	})
	res.text, res.finish, res.err = text.String(), resp.FinishReason, err
	t.obs.response(resp, err)
	if res.sinkErr == nil {
		res.reasoning = rs.ended(attemptStatus(ctx, err), resp)
	}
	if res.sinkErr != nil {
		t.addUsage(resp.Usage, false)
		return res
	}
	if res.err == nil && ctx.Err() == nil && item == nil && len(resp.ToolCalls) == 0 {
		// A successful empty answer still gets its item.
		if item, res.sinkErr = t.openItem(n); res.sinkErr != nil {
			t.addUsage(resp.Usage, false)
			return res
		}
	}
	if item != nil {
		status := msp.ItemFailed
		switch {
		case ctx.Err() != nil && !stopping(ctx):
			status = msp.ItemCancelled // a stopping host's attempt is retried: failed
		case res.err == nil && res.finish != provider.FinishLength && res.finish != provider.FinishContentFilter:
			res.schemaErr, res.toolErr = t.vet(res.text, resp.ToolCalls, schema)
			if res.schemaErr == nil && res.toolErr == nil {
				status = msp.ItemCompleted
			}
		}
		t.closeItem(item, res.text, status)
	}
	if res.err == nil && ctx.Err() == nil && res.finish != provider.FinishLength && res.finish != provider.FinishContentFilter {
		if item == nil {
			res.schemaErr, res.toolErr = t.vet(res.text, resp.ToolCalls, schema)
		}
		if res.toolErr == nil {
			res.calls = resp.ToolCalls
		}
	}
	t.account(resp, t.r.clock.Now().Sub(began), refusedBeforeOutput(res))
	t.noteContext(resp.Usage)
	return res
}

// vet checks a finished answer: its tool calls, when it makes any, or
// else its text against the response schema.
func (t *run) vet(text string, calls []provider.ToolCall, schema *Schema) (schemaErr, toolErr error) {
	if len(calls) > 0 {
		return nil, t.checkCalls(calls)
	}
	if schema != nil {
		return schema.Check(text), nil
	}
	return nil, nil
}

// history is what the next request sends: the session's history, then
// what this turn added, its steps grouped as providers take them.
func (t *run) history() []provider.Message {
	msgs := t.spec.History
	if len(t.messages) > 0 {
		msgs = append(msgs[:len(msgs):len(msgs)], t.messages...)
	}
	return provider.ForeignToolsAsText(provider.Steps(msgs), t.hop.cfg.SameFamily)
}

// refusedBeforeOutput tells whether the provider refused an attempt with
// an error response before accepting it: it generated nothing, so the
// attempt is accounted as zero output tokens rather than as missing usage.
// A dropped connection, a timeout or an error inside an accepted stream
// may have been billed; those stay unknown.
func refusedBeforeOutput(res attemptResult) bool {
	var pe *provider.Error
	return res.err != nil && res.text == "" && errors.As(res.err, &pe) && pe.HTTPStatus != 0 && !pe.Accepted
}

// openItem opens attempt n's answer, under the id AnswerItemID gives it.
func (t *run) openItem(n int) (*msp.Item, error) {
	turnID, empty := t.spec.TurnID, ""
	it := msp.Item{ItemID: AnswerItemID(turnID, n), Kind: msp.ItemAgentMessage, Revision: 1,
		Status: msp.ItemInProgress, TurnID: &turnID, Text: &empty}
	return &it, t.sink.Emit(t.emitCtx, msp.NotifyItemStarted, &msp.ItemParams{Item: it})
}

// answerSpace is the UUID namespace of answer item ids.
var answerSpace = uuid.MustParse("6f1c2a94-3b5e-4d0a-9c71-8e2f5a0b4d13")

// AnswerItemID is the id of the agentMessage item attempt n of turn turnID
// streams its answer into. It is known before the attempt opens the item,
// which it may do on an ephemeral event that a crash leaves no trace of:
// the process that resumes the turn closes that item by this id, so a
// client that saw it open does not keep it open for ever.
func AnswerItemID(turnID string, attempt int) string {
	return uuid.NewSHA1(answerSpace, []byte(turnID+"/"+strconv.Itoa(attempt))).String()
}

// closeItem holds the item's final state, to be written with what
// follows the attempt (its usage, then a retry notice or the terminal).
func (t *run) closeItem(it *msp.Item, text, status string) {
	done := *it
	done.Revision++
	done.Status = status
	done.Text = &text
	done.RecordedAt = t.r.clock.Now().UTC().Format("2006-01-02T15:04:05.000Z")
	t.hold(msp.NotifyItemCompleted, &msp.ItemParams{Item: done})
}

// hold keeps an event for the attempt's closing write.
func (t *run) hold(method string, params msp.ViewParams) {
	t.held = append(t.held, Event{Method: method, Params: params})
}

// takeHeld hands over the held events.
func (t *run) takeHeld() []Event {
	h := t.held
	t.held = nil
	return h
}

// account adds one response's usage to the turn's totals and holds its
// session/tokenUsage; a response without usage makes the count a floor
// (usageComplete false) unless the provider refused it outright.
func (t *run) account(resp provider.Response, took time.Duration, refused bool) {
	if resp.StructuredOutput != "" {
		t.structured = resp.StructuredOutput
	}
	u := resp.Usage
	if !t.addUsage(u, refused) {
		return
	}
	usage := msp.TokenUsage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CachedTokens: u.CachedTokens, ReasoningTokens: u.ReasoningTokens}
	ms := took.Milliseconds()
	t.hold(msp.NotifySessionTokenUsage, &msp.SessionTokenUsageParams{
		TurnID: t.spec.TurnID, Usage: usage, PromptTokens: u.InputTokens,
		TotalTokens: u.InputTokens + u.OutputTokens, DurationMs: &ms,
		FinishReason: resp.FinishReason, ModelID: cmp.Or(resp.Model, t.hop.model), CostUSD: t.hop.cost(*u)})
}

// cost is what usage u cost on the hop's model at its configured price,
// nil when it has none. The hop's model is priced, not the one the
// response names: a provider answering "gpt-4o" with a dated snapshot
// charges the configured model's price, and the hop is the fallback's
// when one answered.
func (h hop) cost(u provider.Usage) *float64 {
	if h.cfg == nil || h.cfg.Models == nil {
		return nil
	}
	p := h.cfg.Models(h.model).Price
	if p == nil {
		return nil
	}
	c := p.Cost(u)
	return &c
}

// addUsage adds one response's usage to the turn's totals and tells
// whether there was any. A response without usage makes the count a floor
// (usageComplete false) unless the provider refused it outright (refused).
func (t *run) addUsage(u *provider.Usage, refused bool) bool {
	if u == nil {
		t.usageComplete = t.usageComplete && refused
		return false
	}
	t.usage.InputTokens += u.InputTokens
	t.usage.OutputTokens += u.OutputTokens
	t.usage.CachedTokens += u.CachedTokens
	t.usage.ReasoningTokens += u.ReasoningTokens
	t.hasUsage = true
	t.outputTokens += u.OutputTokens
	return true
}

// completed, fail and cancelled build the terminal.
func (t *run) completed(answer string) Outcome {
	if answer != "" {
		t.messages = append(t.messages, provider.Message{Role: provider.RoleAssistant, Text: answer})
	}
	o := t.terminal(msp.TerminalCompleted)
	o.Answer = answer
	return o
}

func (t *run) cancelled() Outcome { return t.terminal(msp.TerminalCancelled) }

func (t *run) fail(kind, message string, retryable bool) Outcome {
	o := t.terminal(msp.TerminalFailed)
	o.Completed.Error = &msp.TurnError{Kind: kind, Message: message, Retryable: retryable}
	return o
}

// failDecision reports a failure the retry layer did not retry.
func (t *run) failDecision(d modelretry.Decision) Outcome {
	f := d.Failure
	msg := msp.FailureWords(f.Kind, f.HTTPStatus)
	switch d.Stop {
	case modelretry.StopAttemptsExhausted:
		msg = fmt.Sprintf("%s; gave up after %d attempts", msg, d.Attempt)
	case modelretry.StopRetryAfterTooLong:
		msg = fmt.Sprintf("%s; the provider asked to wait %s, longer than this server waits", msg, d.Delay)
	case modelretry.StopBudgetExhausted:
		msg = fmt.Sprintf("%s; the retry budget for this provider is spent", msp.ErrorKindWords(f.OriginalKind))
	case modelretry.StopDeadline:
		msg = fmt.Sprintf("%s; no time left to retry", msg)
	}
	if f.Message != "" && f.Kind != modelretry.KindTruncated {
		msg = msg + ": " + f.Message
	}
	// retryable tells the user whether trying the turn again may help.
	retryable := f.Retryable || f.Kind == modelretry.KindBudgetExhausted || d.Stop == modelretry.StopAttemptsExhausted
	o := t.fail(msp.TurnErrorModel, clip(t.chainWords(msg), 500), retryable)
	e := o.Completed.Error
	e.ErrorKind, e.HTTPStatus, e.System, e.StopReason = cmp.Or(f.OriginalKind, f.Kind), f.HTTPStatus, t.hop.system(), string(d.Stop)
	return o
}

func (t *run) terminal(terminal string) Outcome {
	now := t.r.clock.Now()
	dur := now.Sub(t.start).Milliseconds()
	c := msp.TurnCompletedParams{
		TurnID:     t.spec.TurnID,
		Terminal:   terminal,
		DurationMs: &dur,
		Attempts: &msp.Attempts{Count: t.attempts, OutputTokens: t.outputTokens,
			UsageComplete: t.usageComplete && t.attempts > 0},
	}
	if t.attempts == 0 {
		c.Attempts.UsageComplete = true // nothing was asked, nothing is missing
	}
	if len(t.spec.ResponseSchema) > 0 && t.structured != "" {
		c.Attempts.StructuredOutput = t.structured
	}
	if !t.firstToken.IsZero() {
		ttft := t.firstToken.Sub(t.start).Milliseconds()
		c.TimeToFirstTokenMs = &ttft
	}
	if t.hasUsage {
		u := t.usage
		c.Usage = &u
	}
	return Outcome{Completed: c, Held: t.takeHeld(), Messages: t.messages}
}

// signal adapts a provider failure for classification.
func signal(err error) modelretry.Signal {
	var pe *provider.Error
	if errors.As(err, &pe) {
		return modelretry.Signal{Kind: pe.Kind, HTTPStatus: pe.HTTPStatus, Header: pe.Header, Message: pe.Message}
	}
	return modelretry.Signal{Message: err.Error()}
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
