package turn

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"mspd/modelretry"
	"mspd/observe"
	"mspd/provider"
	"mspd/schema/msp"
)

// telemetry is one turn's spans, metrics and log lines: a span for the
// turn, a child for each provider attempt (GenAI semantic conventions),
// events for each retry scheduled and each notice written. None of it
// touches the delta path, and without a tracer no span is made at all.
// Attributes and labels carry kinds, counts and ids, never text.
type telemetry struct {
	tracer  trace.Tracer // nil: tracing off
	metrics *observe.Metrics
	log     *slog.Logger
	system  string
	model   string

	ctx  context.Context // the turn span's; log lines carry its trace id
	span trace.Span      // the turn's; nil without a tracer

	// The attempt in flight, until its fate is known.
	open      bool
	attempt   trace.Span // nil without a tracer
	tokens    int64      // output tokens its response reported
	discarded int64      // output tokens of the turn's discarded attempts
}

// startTurn begins the turn's telemetry and returns the context its
// attempts run in.
func (o *telemetry) startTurn(ctx context.Context, cfg *Config, spec Spec) context.Context {
	o.tracer, o.metrics, o.log = cfg.Tracer, cfg.Metrics, cfg.Logger
	o.system, o.model = cfg.Model.System(), spec.Model
	o.ctx = ctx
	if o.tracer == nil {
		return ctx
	}
	o.ctx, o.span = o.tracer.Start(ctx, observe.SpanTurn, trace.WithAttributes(
		observe.AttrConversationID.String(spec.SessionID),
		observe.AttrTurnID.String(spec.TurnID),
		observe.AttrProviderName.String(o.system),
		observe.AttrSystem.String(o.system),
		observe.AttrRequestModel.String(spec.Model),
	))
	return o.ctx
}

// startAttempt opens attempt n's span; ctx is the turn's.
func (o *telemetry) startAttempt(ctx context.Context, n, maxTokens int) context.Context {
	o.open, o.tokens = true, 0
	if o.tracer == nil {
		return ctx
	}
	name := observe.SpanAttemptPrefix
	if o.model != "" {
		name += " " + o.model
	}
	ctx, o.attempt = o.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		observe.AttrOperationName.String(observe.SpanAttemptPrefix),
		observe.AttrProviderName.String(o.system),
		observe.AttrSystem.String(o.system),
		observe.AttrRequestModel.String(o.model),
		observe.AttrMaxTokens.Int(maxTokens),
		observe.AttrAttempt.Int(n),
	))
	return ctx
}

// route names the provider and model the turn's next attempts go to:
// a fallback entry's, after a change of entry.
func (o *telemetry) route(system, model string) {
	o.system, o.model = system, model
}

// fellBack records a step leaving a provider that cannot answer for the
// next of its chain (d widened to the step): a span event and a log line.
func (o *telemetry) fellBack(d modelretry.Decision, from, to, why string) {
	kind := observe.Kind(cmp.Or(d.Failure.OriginalKind, d.Failure.Kind))
	if o.logs(slog.LevelInfo) {
		o.log.Log(o.ctx, slog.LevelInfo, "falling back", "system", from, "error_kind", kind,
			"http_status", d.Failure.HTTPStatus, "attempt", d.Attempt, "next_provider", to, "reason", why)
	}
	if o.span == nil {
		return
	}
	o.span.AddEvent(observe.EventFallback, trace.WithAttributes(
		observe.AttrAttempt.Int(d.Attempt),
		observe.AttrErrorType.String(kind),
		observe.AttrNextProvider.String(to),
		observe.AttrFallbackReason.String(why),
	))
}

// startTool opens a tool call's span under the turn's: GenAI's
// execute_tool, naming the tool and the call, never its arguments.
func (o *telemetry) startTool(ctx context.Context, info ToolInfo, callID string) (context.Context, trace.Span) {
	if o.tracer == nil {
		return ctx, nil
	}
	return o.tracer.Start(ctx, observe.SpanExecuteTool+" "+info.Tool, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			observe.AttrOperationName.String(observe.SpanExecuteTool),
			observe.AttrToolName.String(info.Tool),
			observe.AttrToolCallID.String(callID),
			observe.AttrToolServer.String(info.Server),
		))
}

// endTool records how a tool call ended: its metric and its span.
func (o *telemetry) endTool(span trace.Span, info ToolInfo, status string, took time.Duration) {
	o.metrics.ToolCalled(info.Server, info.Tool, status, took)
	if span == nil {
		return
	}
	span.SetAttributes(observe.AttrToolStatus.String(status))
	if status != msp.ItemCompleted {
		span.SetStatus(codes.Error, status)
	}
	span.End()
}

// approvalAwaited notes that a call waits for a person; the line names
// the tool and the approval, never the arguments.
func (o *telemetry) approvalAwaited(info ToolInfo, approvalID string) {
	if o.logs(slog.LevelInfo) {
		o.log.Log(o.ctx, slog.LevelInfo, "tool call waits for approval", "server", info.Server, "tool", info.Tool, "approval", approvalID)
	}
}

// callRefused records a call its approval kept from running: its status
// is rejected or cancelled.
func (o *telemetry) callRefused(info ToolInfo, status string) {
	o.metrics.ToolRefused(info.Server, info.Tool, status)
}

// response records how the provider answered the attempt in flight.
func (o *telemetry) response(resp provider.Response, err error) {
	if resp.Usage != nil {
		o.tokens = resp.Usage.OutputTokens
	}
	if o.attempt == nil {
		return
	}
	var attrs []attribute.KeyValue
	if u := resp.Usage; u != nil {
		attrs = append(attrs, observe.AttrInputTokens.Int64(u.InputTokens), observe.AttrOutputTokens.Int64(u.OutputTokens))
	}
	if resp.Model != "" {
		attrs = append(attrs, observe.AttrResponseModel.String(resp.Model))
	}
	if resp.FinishReason != "" {
		attrs = append(attrs, observe.AttrFinishReasons.StringSlice([]string{resp.FinishReason}))
	}
	if pe := providerError(err); pe != nil && pe.HTTPStatus != 0 {
		attrs = append(attrs, observe.AttrHTTPStatus.Int(pe.HTTPStatus))
	}
	o.attempt.SetAttributes(attrs...)
}

// decided ends the attempt in flight with the retry layer's verdict.
func (o *telemetry) decided(d modelretry.Decision) {
	outcome, kind := observe.OutcomeFailed, cmp.Or(d.Failure.OriginalKind, d.Failure.Kind)
	switch {
	case d.Retry:
		outcome = observe.OutcomeRetried
	case d.Stop == modelretry.StopCancelled:
		outcome, kind = observe.OutcomeCancelled, modelretry.KindCancelled
	}
	o.endAttempt(outcome, kind)
}

// endAttempt closes the attempt in flight, if any: its span, its request
// count and its output tokens, kept only when its answer is the turn's.
func (o *telemetry) endAttempt(outcome, kind string) {
	if !o.open {
		return
	}
	o.open = false
	o.metrics.ProviderRequest(o.system, o.model, kind, outcome)
	tokens := observe.TokensDiscarded
	if outcome == observe.OutcomeSuccess {
		tokens = observe.TokensKept
	} else {
		o.discarded += o.tokens
	}
	o.metrics.OutputTokens(o.system, tokens, o.tokens)
	if o.attempt == nil {
		return
	}
	o.attempt.SetAttributes(observe.AttrOutcome.String(outcome))
	if kind != "" {
		k := observe.Kind(kind)
		o.attempt.SetAttributes(observe.AttrErrorType.String(k))
		o.attempt.SetStatus(codes.Error, k)
	}
	o.attempt.End()
	o.attempt = nil
}

// retryScheduled records a granted retry as its notice is about to be
// written: the backoff's histogram, a span event and a log line.
func (o *telemetry) retryScheduled(d modelretry.Decision) {
	layer, kind := d.Layer.String(), observe.Kind(d.Failure.Kind)
	o.metrics.RetryScheduled(layer, o.system, d.Failure.Kind, d.Delay)
	if o.logs(slog.LevelInfo) {
		o.log.Log(o.ctx, slog.LevelInfo, "retry scheduled", "system", o.system, "layer", layer, "error_kind", kind,
			"http_status", d.Failure.HTTPStatus, "attempt", d.Attempt, "next_attempt", d.NextAttempt,
			"max_attempts", d.MaxAttempts, "delay", d.Delay)
	}
	if o.span == nil {
		return
	}
	o.span.AddEvent(observe.EventRetryScheduled, trace.WithAttributes(
		observe.AttrLayer.String(layer),
		observe.AttrDelayMs.Int64(d.Delay.Milliseconds()),
		observe.AttrAttempt.Int(d.Attempt),
		observe.AttrNextAttempt.Int(d.NextAttempt),
		observe.AttrErrorType.String(kind),
	))
}

// noticeWritten records a retry notice made durable, at its cursor.
func (o *telemetry) noticeWritten(ev Event) {
	if o.span == nil {
		return
	}
	o.span.AddEvent(observe.EventNoticeWritten, trace.WithAttributes(
		observe.AttrMethod.String(ev.Method),
		observe.AttrCursor.String(ev.Params.Header().ViewCursor),
	))
}

// endTurn closes the attempt still open and the turn: its span, its
// duration and time to first token, and a log line.
func (o *telemetry) endTurn(out Outcome, attempts int) {
	if out.Stopped != nil {
		// The host stopped it; the next process resumes it.
		o.endAttempt(observe.OutcomeCancelled, modelretry.KindCancelled)
		if o.logs(slog.LevelInfo) {
			o.log.Log(o.ctx, slog.LevelInfo, "turn stopped with the host", "system", o.system, "attempts", attempts)
		}
		if o.span != nil {
			o.span.SetAttributes(observe.AttrTerminal.String("stopped"))
			o.span.End()
		}
		return
	}
	c := out.Completed
	switch c.Terminal {
	case msp.TerminalCompleted:
		o.endAttempt(observe.OutcomeSuccess, "")
	case msp.TerminalCancelled:
		o.endAttempt(observe.OutcomeCancelled, modelretry.KindCancelled)
	default:
		o.endAttempt(observe.OutcomeFailed, "")
	}
	duration, firstToken := ms(c.DurationMs), time.Duration(-1)
	if c.TimeToFirstTokenMs != nil {
		firstToken = ms(c.TimeToFirstTokenMs)
	}
	o.metrics.TurnEnded(o.system, o.model, c.Terminal, duration, firstToken)
	e := c.Error
	switch {
	case e != nil && o.logs(slog.LevelWarn):
		o.log.Log(o.ctx, slog.LevelWarn, "turn failed", "system", o.system, "kind", e.Kind, "error_kind", observe.Kind(e.ErrorKind),
			"stop_reason", e.StopReason, "attempts", attempts, "duration", duration)
	case e == nil && o.logs(slog.LevelDebug):
		o.log.Log(o.ctx, slog.LevelDebug, "turn ended", "system", o.system, "terminal", c.Terminal, "attempts", attempts, "duration", duration)
	}
	if o.span == nil {
		return
	}
	o.span.SetAttributes(observe.AttrTerminal.String(c.Terminal), observe.AttrDiscardedTokens.Int64(o.discarded))
	if c.Attempts != nil {
		o.span.SetAttributes(observe.AttrAttempts.Int(c.Attempts.Count))
	}
	if e != nil {
		// The provider's errorKind behind a modelError, else mspd's own
		// terminal kind (logError, configError, hostRestarted).
		kind := e.Kind
		if e.ErrorKind != "" {
			kind = observe.Kind(e.ErrorKind)
		}
		o.span.SetAttributes(observe.AttrErrorType.String(kind))
		o.span.SetStatus(codes.Error, kind)
	}
	o.span.End()
}

// logs tells whether a line at level about the turn is wanted; its
// arguments are built only then (they would allocate on every turn).
func (o *telemetry) logs(level slog.Level) bool {
	return o.log != nil && o.log.Enabled(o.ctx, level)
}

// spanContext is the turn span's, for the caller's log lines about it.
func (o *telemetry) spanContext() trace.SpanContext {
	return trace.SpanContextFromContext(o.ctx)
}

func ms(v *int64) time.Duration {
	if v == nil {
		return 0
	}
	return time.Duration(*v) * time.Millisecond
}

func providerError(err error) *provider.Error {
	var pe *provider.Error
	if errors.As(err, &pe) {
		return pe
	}
	return nil
}
