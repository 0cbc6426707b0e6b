package tail

import (
	"fmt"
	"strings"

	"mspd/schema/msp"
)

// Fallbacks and skipped providers: a turn whose provider cannot answer
// moves to the next provider of its chain at once (the failed attempt's
// notice says fallback, with no wait), and a provider whose circuit
// breaker is open is passed over without a request (turn/providerSkipped).
// Each is one line, "↪ openai rate limited (HTTP 429) · answering with
// claude-sonnet-4-5", "↪ openai down (circuit open) · answering with
// claude-sonnet-4-5": no countdown, as nothing waits.

// fallback shows a fallback notice. A wait counting down for this turn
// ends: the attempt it announced ran and failed, and the provider is left.
func (r *renderer) fallback(p msp.TurnModelRetryScheduledParams) {
	if w := r.wait; w != nil {
		if w.n.turnID == p.TurnID && p.Attempt >= w.n.next {
			r.settle("retried")
		} else {
			r.settle("not retried")
		}
	}
	r.println(r.paint(yellow, fallbackLine(p)))
}

// fallbackLine words a fallback notice: "↪ openai rate limited (HTTP
// 429) · answering with claude-sonnet-4-5"; ", circuit open" follows the
// failure when the provider's breaker opened meanwhile.
func fallbackLine(p msp.TurnModelRetryScheduledParams) string {
	what := msp.ErrorKindWords(p.ErrorKind)
	if p.HTTPStatus != 0 {
		what += fmt.Sprintf(" (HTTP %d)", p.HTTPStatus)
	}
	if p.FallbackReason == msp.FallbackCircuitOpen {
		what += ", circuit open"
	}
	who := p.System
	if who == "" {
		who = "the provider"
	}
	return "↪ " + oneLine(who+" "+what) + " · answering with " + answerer(p.NextProviderID, p.NextModelID)
}

// skippedLine words turn/providerSkipped: "↪ openai down (circuit open)
// · answering with claude-sonnet-4-5".
func skippedLine(p msp.TurnProviderSkippedParams) string {
	who := p.System
	if who == "" {
		who = p.ProviderID
	}
	return "↪ " + oneLine(who+" down ("+breakerWords(p.Breaker)+")") + " · answering with " + answerer(p.NextProviderID, p.NextModelID)
}

// breakerWords words a breaker state: "circuit open", "circuit
// half-open".
func breakerWords(state string) string {
	switch state {
	case "open", "":
		return "circuit open"
	case "halfOpen":
		return "circuit half-open"
	}
	return "circuit " + msp.ErrorKindWords(state)
}

// answerer names who answers next: the model's short name, else the
// provider.
func answerer(providerID, modelID string) string {
	if modelID == "" {
		return oneLine(providerID)
	}
	return oneLine(shortModel(modelID))
}

// shortModel is a model id as a person reads it: without a gateway's
// vendor prefix ("anthropic/…") or a dated snapshot's suffix
// ("-20250929", "-2024-07-18", "@20240620"):
// "anthropic/claude-sonnet-4-5-20250929" → "claude-sonnet-4-5".
func shortModel(id string) string {
	if i := strings.LastIndexByte(id, '/'); i >= 0 && i < len(id)-1 {
		id = id[i+1:]
	}
	if i := strings.IndexByte(id, '@'); i > 0 {
		id = id[:i]
	}
	for _, n := range []int{len("-20250929"), len("-2024-07-18")} {
		if tail := id[max(len(id)-n+1, 0):]; len(id) > n && id[len(id)-n] == '-' && isDate(tail) &&
			(n == len("-20250929")) == !strings.Contains(tail, "-") {
			return id[:len(id)-n]
		}
	}
	return id
}

// isDate tells whether s is a date, 20250929 or 2024-07-18: a year
// 19xx or 20xx, a month and a day.
func isDate(s string) bool {
	s = strings.ReplaceAll(s, "-", "")
	if len(s) != 8 || strings.Trim(s, "0123456789") != "" || (s[:2] != "19" && s[:2] != "20") {
		return false
	}
	month, day := (s[4]-'0')*10+s[5]-'0', (s[6]-'0')*10+s[7]-'0'
	return month >= 1 && month <= 12 && day >= 1 && day <= 31
}

// imageTags words a user message's images: "[image: image/png 800×600,
// 120 KB]" each, a space between (the size is the stored bytes'), or ""
// for none.
func imageTags(atts []msp.MessageAttachment) string {
	var b strings.Builder
	for i, a := range atts {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString("[")
		b.WriteString(oneLine(a.Type))
		if a.MediaType != "" {
			b.WriteString(": " + oneLine(a.MediaType))
		}
		if a.Width != nil && a.Height != nil {
			fmt.Fprintf(&b, " %d×%d", *a.Width, *a.Height)
		}
		if a.OutputRef != nil {
			b.WriteString(", " + byteSize(a.OutputRef.ByteLen))
		}
		b.WriteString("]")
	}
	return b.String()
}

// byteSize words a byte count: "812 B", "4.2 KB", "120 KB", "1.3 MB".
func byteSize(n int64) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%d B", max(n, 0))
	case n < 10*1024:
		return fmt.Sprintf("%.1f KB", float64(n)/1024)
	case n < 1024*1024:
		return fmt.Sprintf("%d KB", (n+512)/1024)
	}
	return fmt.Sprintf("%.1f MB", float64(n)/(1024*1024))
}
