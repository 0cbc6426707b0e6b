// Package demo is mspd's offline default model: a small local text generator
// with optional fault injection, so mspd runs, streams and shows retries with
// no API key and no network.
//
// Replies are a few template sentences about words taken from the prompt,
// streamed word by word at a realistic pace. Everything random is drawn from
// an RNG seeded by Config.Seed and the request itself (history, model and
// attempt), so a given seed and request always produce the same reply and the
// same fault, whatever order requests arrive in. A Model keeps no mutable
// state and is safe for concurrent use.
//
// When ctx is cancelled, Stream stops before the next word and returns
// ctx.Err() unwrapped.
package demo

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	"mspd/modelretry"
	"mspd/provider"
)

// System is the provider name the demo model reports.
const System = "demo"

// DefaultModel is the model id reported when the request names none.
const DefaultModel = "demo-1"

// DefaultWordDelay is the pause before each streamed word when
// Config.WordDelay is zero: roughly the pace of a hosted chat model.
const DefaultWordDelay = 35 * time.Millisecond

// NoDelay, as Config.WordDelay, streams with no pauses at all (for tests).
// Any negative WordDelay means the same.
const NoDelay time.Duration = -1

// DefaultMaxFaultAttempt is the last attempt of a turn that may fail when
// Config.MaxFaultAttempt is zero. Attempts 1 and 2 may fail, attempt 3 never
// does, so any retry policy allowing 3 attempts always gets an answer.
const DefaultMaxFaultAttempt = 2

// firstWordDelays is how many word delays pass before the first word (or a
// fault): a hosted model's time to first token is longer than its pace.
const firstWordDelays = 4

// Config configures a demo Model. The zero value streams at the default pace
// with no faults and a time-based seed.
type Config struct {
	// WordDelay is the pause before each streamed word. Zero means
	// DefaultWordDelay; negative (see NoDelay) means no pause.
	WordDelay time.Duration
	// FaultRate in [0,1] is the share of eligible requests that fail before
	// any output. Values outside the range are clamped; NaN means 0.
	FaultRate float64
	// Seed makes replies and faults reproducible. Zero picks a time-based
	// seed once, in New.
	Seed int64
	// MaxFaultAttempt is the last attempt of a turn that may fail; later
	// attempts always answer. Zero means DefaultMaxFaultAttempt; negative
	// means no attempt fails.
	MaxFaultAttempt int
}

// Model is the demo provider.Model. Create it with New.
type Model struct {
	wordDelay       time.Duration
	faultRate       float64
	seed            uint64
	maxFaultAttempt int
}

// New returns a demo model configured by cfg.
func New(cfg Config) *Model {
	m := &Model{
		wordDelay:       cfg.WordDelay,
		faultRate:       cfg.FaultRate,
		seed:            uint64(cfg.Seed),
		maxFaultAttempt: cfg.MaxFaultAttempt,
	}
	switch {
	case m.wordDelay == 0:
		m.wordDelay = DefaultWordDelay
	case m.wordDelay < 0:
		m.wordDelay = 0
	}
	switch {
	case math.IsNaN(m.faultRate) || m.faultRate < 0:
		m.faultRate = 0
	case m.faultRate > 1:
		m.faultRate = 1
	}
	if m.seed == 0 {
		m.seed = uint64(time.Now().UnixNano())
	}
	if m.maxFaultAttempt == 0 {
		m.maxFaultAttempt = DefaultMaxFaultAttempt
	}
	return m
}

// System implements provider.Model.
func (*Model) System() string { return System }

// Stream implements provider.Model: it may inject a fault, then streams a
// generated reply (or, when req has a ResponseSchema, a JSON value for it)
// one word per delta, stopping with FinishLength after req.MaxTokens words.
// Offered a clock or a calculator, it calls one when the user's message
// asks the time or holds arithmetic, then answers from the result. Asked
// for a reasoning effort other than none, it reasons briefly first
// (reasoning.go).
func (m *Model) Stream(ctx context.Context, req provider.Request, onText func(string)) (provider.Response, error) {
	if err := m.wait(ctx, firstWordDelays); err != nil {
		return provider.Response{}, err
	}
	if err := m.fault(req); err != nil {
		return provider.Response{}, err
	}

	prompt := provider.LastUserText(req.Messages)
	thought, err := m.reason(ctx, req, keywords(prompt))
	if err != nil {
		return provider.Response{}, err
	}
	r := m.rng("reply", req)
	text := reply(r, keywords(prompt))
	resp := provider.Response{FinishReason: provider.FinishStop, Model: req.Model}
	if resp.Model == "" {
		resp.Model = DefaultModel
	}
	var call *provider.ToolCall
	if plan, ok := planTools(req); ok && len(req.ResponseSchema) == 0 {
		text, call = plan.answer, plan.call
		if call != nil {
			text = plan.lead
		}
	}
	if note := imagesNote(req.Messages); note != "" && call == nil {
		text = note + " " + text
	}
	if len(req.ResponseSchema) > 0 {
		var node schema
		if err := json.Unmarshal(req.ResponseSchema, &node); err != nil {
			return provider.Response{}, &provider.Error{
				Kind:       modelretry.KindInvalidRequest,
				HTTPStatus: http.StatusBadRequest,
				Message:    "demo: response schema is not valid JSON: " + err.Error(),
				Err:        err,
			}
		}
		text = jsonFor(r, &node, keywords(prompt), 0)
		resp.StructuredOutput = provider.StructuredPrompt
	}

	// One token per word keeps the MaxTokens arithmetic obvious in the UI.
	words := provider.SplitWords(text)
	if req.MaxTokens > 0 && len(words) > req.MaxTokens {
		words = words[:req.MaxTokens]
		resp.FinishReason = provider.FinishLength
	}
	for i, w := range words {
		if i > 0 {
			if err := m.wait(ctx, 1); err != nil {
				return provider.Response{}, err
			}
		}
		if err := ctx.Err(); err != nil {
			return provider.Response{}, err
		}
		onText(w)
	}
	if err := ctx.Err(); err != nil {
		return provider.Response{}, err
	}
	resp.Usage = &provider.Usage{
		InputTokens:     promptWords(req.Messages),
		OutputTokens:    int64(len(words)) + thought,
		ReasoningTokens: thought,
	}
	if call != nil && resp.FinishReason == provider.FinishStop {
		resp.FinishReason, resp.ToolCalls = provider.FinishToolCalls, []provider.ToolCall{*call}
	}
	return resp, nil
}

// imagesNote says what images the turn's own message (the last user
// message) carried, so the demo shows that they reached the model; ""
// when none did.
func imagesNote(msgs []provider.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != provider.RoleUser {
			continue
		}
		var kinds []string
		for _, im := range msgs[i].Images {
			kinds = append(kinds, fmt.Sprintf("%s of %d bytes", im.MediaType, provider.DecodedLen(im.Data)))
		}
		switch len(kinds) {
		case 0:
			return ""
		case 1:
			return "I got your image (" + kinds[0] + ")."
		}
		return fmt.Sprintf("I got your %d images (%s).", len(kinds), strings.Join(kinds, ", "))
	}
	return ""
}

// fault decides whether req fails before output and, if so, how.
func (m *Model) fault(req provider.Request) error {
	attempt := max(req.Attempt, 1)
	if m.maxFaultAttempt < 0 || attempt > m.maxFaultAttempt {
		return nil
	}
	r := m.rng("fault", req)
	if r.Float64() >= m.faultRate {
		return nil
	}
	// The five failures the retry layer must handle before output begins.
	switch r.IntN(5) {
	case 0:
		h := http.Header{}
		h.Set("retry-after-ms", strconv.Itoa(300+r.IntN(1201)))
		return &provider.Error{Kind: modelretry.KindRateLimited, HTTPStatus: http.StatusTooManyRequests, Header: h,
			Message: "demo: rate limit reached for requests"}
	case 1:
		return &provider.Error{Kind: modelretry.KindOverloaded, HTTPStatus: http.StatusServiceUnavailable,
			Message: "demo: service unavailable"}
	case 2:
		h := http.Header{}
		h.Set("x-should-retry", "true")
		return &provider.Error{Kind: modelretry.KindOverloaded, HTTPStatus: 529, Header: h,
			Message: "demo: overloaded"}
	case 3:
		return &provider.Error{Kind: modelretry.KindTimeout, Message: "demo: timed out waiting for the first byte"}
	default:
		return &provider.Error{Kind: modelretry.KindConnectionError, Message: "demo: connection reset by peer"}
	}
}

// rng derives a generator from the seed, a purpose and the request, so
// results depend on what is asked and not on the order of requests.
func (m *Model) rng(purpose string, req provider.Request) *rand.Rand {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], m.seed)
	h.Write(b[:])
	write := func(s string) {
		binary.LittleEndian.PutUint64(b[:], uint64(len(s)))
		h.Write(b[:])
		h.Write([]byte(s))
	}
	write(purpose)
	write(req.Model)
	write(strconv.Itoa(max(req.Attempt, 1)))
	for _, msg := range req.Messages {
		write(msg.Role)
		write(msg.Text)
	}
	return rand.New(rand.NewPCG(h.Sum64(), m.seed))
}

// wait pauses n word delays unless ctx ends first.
func (m *Model) wait(ctx context.Context, n int) error {
	return provider.Wait(ctx, time.Duration(n)*m.wordDelay)
}

// reply builds a few sentences about the prompt's keywords. The opener and
// closer share a main topic; each middle sentence draws its own pair, so a
// prompt with several keywords gets a reply that touches more than one.
func reply(r *rand.Rand, keys []string) string {
	fallback := fallbackTopics()
	pair := func(main string) (a, b string) {
		b = fallback[r.IntN(len(fallback))]
		switch {
		case len(keys) == 0:
			return "your question", b
		case main == "" || r.IntN(2) == 0:
			a = keys[r.IntN(len(keys))]
		default:
			a = main
		}
		if len(keys) > 1 {
			for b = a; b == a; {
				b = keys[r.IntN(len(keys))]
			}
		}
		return a, b
	}
	fill := func(t, a, b string) string {
		return strings.NewReplacer("{A}", capitalise(a), "{a}", a, "{b}", b).Replace(t)
	}
	openers, middles, closers := openers(), middles(), closers()
	main, other := pair("")
	sentences := []string{fill(openers[r.IntN(len(openers))], main, other)}
	for _, i := range r.Perm(len(middles))[:2+r.IntN(3)] {
		a, b := pair(main)
		sentences = append(sentences, fill(middles[i], a, b))
	}
	sentences = append(sentences, fill(closers[r.IntN(len(closers))], main, other))
	return strings.Join(sentences, " ")
}

func openers() []string {
	return []string{
		"Good question about {a}.",
		"Let's think about {a} for a moment.",
		"Here is a short take on {a}.",
		"{A} has more depth than it first appears.",
		"Happy to help with {a}.",
		"There are a few ways to look at {a}.",
	}
}

func middles() []string {
	return []string{
		"The first thing to check is how {a} interacts with {b}.",
		"In practice, {a} comes down to a handful of trade-offs.",
		"A common approach is to start small, measure, and only then tune {a}.",
		"If {b} matters more to you, favour the simpler option.",
		"Keep in mind that {a} rarely fails in isolation; {b} usually plays a part.",
		"One practical step is to write down what {a} should do, then test exactly that.",
		"It also helps to look at {a} from the side of whoever depends on it.",
		"Most surprises with {a} come from assumptions nobody wrote down.",
		"When {b} changes, revisit what you assumed about {a}.",
		"A good rule of thumb is to make {a} boring before you make it fast.",
		"Comparing two or three concrete examples of {b} usually makes the choice clearer.",
		"Be wary of advice about {a} that ignores your own constraints.",
	}
}

func closers() []string {
	return []string{
		"I hope that gives you a useful starting point.",
		"Happy to go deeper on {b} if that helps.",
		"Let me know which part of {a} you want to explore next.",
		"In short: keep {a} simple, and let {b} guide the details.",
		"(This answer comes from mspd's offline demo model, so treat it as a sketch.)",
	}
}

func fallbackTopics() []string {
	return []string{"the surrounding system", "the people who rely on it", "your constraints", "the context around it"}
}

// keywords are the prompt's distinctive words, lower-cased, in order of
// first appearance.
func keywords(prompt string) []string {
	var keys []string
	seen := map[string]bool{}
	for _, w := range strings.FieldsFunc(prompt, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '-'
	}) {
		w = strings.ToLower(strings.Trim(w, "-"))
		if len([]rune(w)) < 4 || stopword(w) || seen[w] {
			continue
		}
		seen[w] = true
		keys = append(keys, w)
	}
	return keys
}

func stopword(w string) bool {
	switch w {
	case "about", "after", "also", "been", "before", "being", "between", "could", "does",
		"doing", "done", "each", "explain", "from", "give", "have", "hello", "help", "here",
		"into", "just", "know", "like", "many", "maybe", "might", "more", "most", "much",
		"must", "need", "only", "other", "over", "please", "really", "should", "some", "such",
		"tell", "than", "thank", "thanks", "that", "their", "them", "then", "there", "these",
		"they", "thing", "things", "this", "those", "very", "want", "were", "what", "when",
		"where", "which", "while", "will", "with", "within", "without", "would", "write",
		"your", "yours":
		return true
	}
	return false
}

func capitalise(s string) string {
	for i, r := range s {
		return string(unicode.ToUpper(r)) + s[i+len(string(r)):]
	}
	return s
}

// schema is the small part of JSON Schema the demo honours.
type schema struct {
	Type       json.RawMessage   `json:"type"`
	Enum       []json.RawMessage `json:"enum"`
	Const      json.RawMessage   `json:"const"`
	Properties json.RawMessage   `json:"properties"`
	Items      *schema           `json:"items"`
}

// typeName is the schema's type, the first non-null one of a type list, or
// "object" when only properties say so.
func (s *schema) typeName() string {
	var one string
	if json.Unmarshal(s.Type, &one) == nil && one != "" {
		return one
	}
	var many []string
	if json.Unmarshal(s.Type, &many) == nil {
		for _, t := range many {
			if t != "null" {
				return t
			}
		}
	}
	if len(s.Properties) > 0 {
		return "object"
	}
	return ""
}

// jsonFor renders a value that satisfies simple schemas: objects (every
// property, in schema order), arrays of one item, strings, numbers,
// integers, booleans, null, enum and const. Constraints such as minimum or
// pattern are not honoured.
func jsonFor(r *rand.Rand, s *schema, keys []string, depth int) string {
	if len(s.Const) > 0 {
		return compact(s.Const)
	}
	if len(s.Enum) > 0 {
		return compact(s.Enum[r.IntN(len(s.Enum))])
	}
	const maxDepth = 4 // recursive schemas must not recurse forever
	switch s.typeName() {
	case "object":
		if depth >= maxDepth {
			return "{}"
		}
		var parts []string
		for name, prop := range properties(s.Properties) {
			k, _ := json.Marshal(name)
			parts = append(parts, string(k)+": "+jsonFor(r, prop, keys, depth+1))
		}
		if len(parts) == 0 {
			return "{}"
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case "array":
		if s.Items == nil || depth >= maxDepth {
			return "[]"
		}
		return "[" + jsonFor(r, s.Items, keys, depth+1) + "]"
	case "number":
		return strconv.FormatFloat(float64(r.IntN(10000))/100, 'f', -1, 64)
	case "integer":
		return strconv.Itoa(1 + r.IntN(100))
	case "boolean":
		return strconv.FormatBool(r.IntN(2) == 0)
	case "null":
		return "null"
	}
	words := []string{"demo"}
	for range 1 + r.IntN(2) {
		if len(keys) > 0 {
			words = append(words, keys[r.IntN(len(keys))])
		}
	}
	v, _ := json.Marshal(strings.Join(words, " "))
	return string(v)
}

// properties yields an object schema's properties in document order, which
// a map would lose; entries that are not schema objects are skipped.
func properties(raw json.RawMessage) func(yield func(string, *schema) bool) {
	return func(yield func(string, *schema) bool) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		if t, err := dec.Token(); err != nil || t != json.Delim('{') {
			return
		}
		for dec.More() {
			t, err := dec.Token()
			if err != nil {
				return
			}
			name, _ := t.(string)
			var prop schema
			if err := dec.Decode(&prop); err != nil {
				continue
			}
			if !yield(name, &prop) {
				return
			}
		}
	}
}

// compact renders a literal from the schema on one line, byte for byte
// the same value.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return "null"
	}
	return b.String()
}

// promptWords estimates input tokens as the words of the whole history.
func promptWords(msgs []provider.Message) int64 {
	n := 0
	for _, m := range msgs {
		n += len(strings.Fields(m.Text))
	}
	return int64(max(1, n))
}

// String describes the configuration, for startup logs.
func (m *Model) String() string {
	return fmt.Sprintf("demo model (word delay %v, fault rate %.2f, faults up to attempt %d, seed %d)",
		m.wordDelay, m.faultRate, m.maxFaultAttempt, int64(m.seed))
}
