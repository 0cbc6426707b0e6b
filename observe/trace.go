package observe

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation scope of mspd's spans.
const TracerName = "mspd"

// Span names.
const (
	// SpanTurn is the span of one turn, from its runner's start to its
	// terminal.
	SpanTurn = "mspd.turn"
	// SpanAttemptPrefix begins an attempt's span name: GenAI's
	// "{gen_ai.operation.name} {gen_ai.request.model}".
	SpanAttemptPrefix = "chat"
	// SpanExecuteTool is the span of one tool call: GenAI's
	// "execute_tool {gen_ai.tool.name}".
	SpanExecuteTool = "execute_tool"
)

// Span event names.
const (
	// EventRetryScheduled marks a granted retry, before its notice and
	// backoff.
	EventRetryScheduled = "mspd.retry.scheduled"
	// EventNoticeWritten marks a retry notice durable in the session log.
	EventNoticeWritten = "mspd.notice.written"
	// EventFallback marks a step leaving a provider for the next of its
	// fallback chain, before the notice naming it.
	EventFallback = "mspd.fallback"
)

// Attribute keys of mspd's own; the GenAI ones come from semconv.
const (
	// AttrSystem is gen_ai.system, the older name of gen_ai.provider.name,
	// still read by many backends.
	AttrSystem = attribute.Key("gen_ai.system")
	// AttrTurnID is the turn's id (its commandId).
	AttrTurnID = attribute.Key("mspd.turn.id")
	// AttrTerminal is the turn's terminal: completed, failed, cancelled.
	AttrTerminal = attribute.Key("mspd.turn.terminal")
	// AttrAttempts is the turn's attempts.count so far.
	AttrAttempts = attribute.Key("mspd.turn.attempts")
	// AttrDiscardedTokens are the output tokens of the turn's attempts
	// that were thrown away.
	AttrDiscardedTokens = attribute.Key("mspd.turn.output_tokens.discarded")
	// AttrAttempt is the 1-based number of an attempt (or the failed one
	// a retry follows).
	AttrAttempt = attribute.Key("mspd.attempt")
	// AttrNextAttempt is the attempt a retry schedules.
	AttrNextAttempt = attribute.Key("mspd.retry.next_attempt")
	// AttrOutcome is how an attempt ended (OutcomeSuccess, …).
	AttrOutcome = attribute.Key("mspd.attempt.outcome")
	// AttrLayer is a retry's layer: model or turn.
	AttrLayer = attribute.Key("mspd.retry.layer")
	// AttrDelayMs is a retry's backoff in milliseconds (retryDelayMs).
	AttrDelayMs = attribute.Key("mspd.retry.delay_ms")
	// AttrMethod is the MSP method of a notice.
	AttrMethod = attribute.Key("mspd.notice.method")
	// AttrCursor is the view cursor a notice was written at.
	AttrCursor = attribute.Key("mspd.notice.cursor")
	// AttrToolServer is the MCP server of a tool call.
	AttrToolServer = attribute.Key("mspd.tool.server")
	// AttrToolStatus is how a tool call ended: its item's status.
	AttrToolStatus = attribute.Key("mspd.tool.status")
	// AttrNextProvider is the provider id a fallback goes to.
	AttrNextProvider = attribute.Key("mspd.fallback.next_provider")
	// AttrFallbackReason is why a step left its provider (fallbackReason).
	AttrFallbackReason = attribute.Key("mspd.fallback.reason")
)

// GenAI semantic convention keys (semconv v1.40.0), re-exported so the
// turn layer names them in one place.
var (
	AttrOperationName  = semconv.GenAIOperationNameKey
	AttrProviderName   = semconv.GenAIProviderNameKey
	AttrRequestModel   = semconv.GenAIRequestModelKey
	AttrMaxTokens      = semconv.GenAIRequestMaxTokensKey
	AttrResponseModel  = semconv.GenAIResponseModelKey
	AttrFinishReasons  = semconv.GenAIResponseFinishReasonsKey
	AttrInputTokens    = semconv.GenAIUsageInputTokensKey
	AttrOutputTokens   = semconv.GenAIUsageOutputTokensKey
	AttrConversationID = semconv.GenAIConversationIDKey
	AttrErrorType      = semconv.ErrorTypeKey
	AttrHTTPStatus     = semconv.HTTPResponseStatusCodeKey
	AttrToolName       = semconv.GenAIToolNameKey
	AttrToolCallID     = semconv.GenAIToolCallIDKey
)

// Tracer returns mspd's tracer from tp; nil for a nil tp, which turns
// tracing off at no cost.
func Tracer(tp trace.TracerProvider, version string) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(TracerName, trace.WithInstrumentationVersion(version), trace.WithSchemaURL(semconv.SchemaURL))
}

// TracingConfigured tells whether the environment names an OTLP traces
// endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) and does not turn tracing off
// (OTEL_SDK_DISABLED=true, OTEL_TRACES_EXPORTER=none). Nothing is
// exported otherwise.
func TracingConfigured(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") || getenv("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// NewTracerProvider returns a tracer provider that batches spans to an
// OTLP/HTTP endpoint configured by the standard OTEL_EXPORTER_OTLP_*
// variables (endpoint, headers, timeout, compression, certificates,
// protocol http/protobuf or http/json), with OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES for the resource, OTEL_TRACES_SAMPLER(_ARG)
// for sampling and OTEL_BSP_* for batching. It returns nil, nil when
// TracingConfigured(os.Getenv) is false. Shut it down to flush. It is
// never installed as OpenTelemetry's global provider: SDKs mspd links
// (Anthropic's) would trace through a global one, with request details
// mspd does not vouch for.
func NewTracerProvider(ctx context.Context, version string) (*sdktrace.TracerProvider, error) {
	if !TracingConfigured(os.Getenv) {
		return nil, nil
	}
	if exp := os.Getenv("OTEL_TRACES_EXPORTER"); exp != "" && exp != "otlp" {
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: mspd exports traces over OTLP only (otlp or none)", exp)
	}
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" && proto != "http/protobuf" && proto != "http/json" {
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: mspd exports OTLP over HTTP (http/protobuf or http/json); point it at the collector's HTTP port (4318)", proto)
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("mspd"), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}
