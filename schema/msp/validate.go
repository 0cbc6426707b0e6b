package msp

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

//go:embed msp.schema.json
var schemaJSON []byte

// schemaURL is the name the embedded schema is compiled under. Nothing is
// fetched from it; it only anchors "#/$defs/..." references.
const schemaURL = "https://mspd.invalid/schema/msp.schema.json"

// uuidPattern is the pattern msp.schema.json puts on every commandId; it is
// repeated here only to give a friendlier message than the regular expression.
const uuidPattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"

// SchemaJSON returns the embedded msp.schema.json. The slice is a copy, so
// callers may keep or modify it.
func SchemaJSON() []byte { return bytes.Clone(schemaJSON) }

var fingerprint = sync.OnceValue(func() string {
	sum := sha256.Sum256(schemaJSON)
	return "sha256:" + hex.EncodeToString(sum[:])
})

// Fingerprint returns "sha256:" followed by the lowercase hex SHA-256 of
// SchemaJSON, the form of InitializeResult.schema.fingerprint.
func Fingerprint() string { return fingerprint() }

// FieldError is one validation failure.
type FieldError struct {
	// Field is the dotted path of the offending member from the validated
	// root ("retry.maxAttempts", "input.0.type"); "" is the root itself.
	// For a missing required member it names that member.
	Field string
	// Message says what is wrong, briefly, for humans.
	Message string
}

// Error formats the failure as "field: message".
func (e FieldError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// Validator checks MSP params, results and frames against msp.schema.json.
// It is safe for concurrent use.
type Validator struct {
	c *compiled
}

// compiled is the schema compiled once per process; it is never modified
// after compileSchema returns.
type compiled struct {
	defs          map[string]*jsonschema.Schema
	requests      map[string]methodSchemas // client to server
	notifications map[string]methodSchemas
	asks          map[string]methodSchemas // server to client requests
}

// methodSchemas are a method's params and result schemas; nil means the
// method declares none (initialized has no params, notifications no result).
type methodSchemas struct {
	params, result *jsonschema.Schema
}

var compileOnce = sync.OnceValues(compileSchema)

// NewValidator returns a validator for the embedded schema. The schema is
// compiled once per process; later calls share it.
func NewValidator() (*Validator, error) {
	c, err := compileOnce()
	if err != nil {
		return nil, err
	}
	return &Validator{c: c}, nil
}

func compileSchema() (*compiled, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		return nil, fmt.Errorf("msp: parse msp.schema.json: %w", err)
	}
	var top struct {
		Defs          map[string]json.RawMessage  `json:"$defs"`
		Methods       map[string]methodDescriptor `json:"methods"`
		Notifications map[string]methodDescriptor `json:"notifications"`
		Requests      map[string]methodDescriptor `json:"requests"`
	}
	if err := json.Unmarshal(schemaJSON, &top); err != nil {
		return nil, fmt.Errorf("msp: parse msp.schema.json: %w", err)
	}
	jc := jsonschema.NewCompiler()
	if err := jc.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("msp: load msp.schema.json: %w", err)
	}
	c := &compiled{
		defs:          make(map[string]*jsonschema.Schema, len(top.Defs)),
		requests:      make(map[string]methodSchemas, len(top.Methods)),
		notifications: make(map[string]methodSchemas, len(top.Notifications)),
		asks:          make(map[string]methodSchemas, len(top.Requests)),
	}
	for name := range top.Defs {
		sch, err := jc.Compile(schemaURL + "#/$defs/" + name)
		if err != nil {
			return nil, fmt.Errorf("msp: compile $defs/%s: %w", name, err)
		}
		c.defs[name] = sch
	}
	for method, d := range top.Methods {
		if c.requests[method], err = c.resolve(d); err != nil {
			return nil, fmt.Errorf("msp: methods[%q]: %w", method, err)
		}
	}
	for method, d := range top.Notifications {
		if c.notifications[method], err = c.resolve(d); err != nil {
			return nil, fmt.Errorf("msp: notifications[%q]: %w", method, err)
		}
	}
	for method, d := range top.Requests {
		if c.asks[method], err = c.resolve(d); err != nil {
			return nil, fmt.Errorf("msp: requests[%q]: %w", method, err)
		}
	}
	return c, nil
}

// resolve looks up the compiled params and result schemas a method entry
// refers to.
func (c *compiled) resolve(d methodDescriptor) (methodSchemas, error) {
	var ms methodSchemas
	var err error
	if ms.params, err = c.ref(d.Params); err != nil {
		return ms, err
	}
	ms.result, err = c.ref(d.Result)
	return ms, err
}

// ref returns the compiled $defs entry a {"$ref": "#/$defs/Name"} names;
// nil for an absent one.
func (c *compiled) ref(r *refObject) (*jsonschema.Schema, error) {
	if r == nil {
		return nil, nil
	}
	name, ok := strings.CutPrefix(r.Ref, "#/$defs/")
	if !ok || c.defs[name] == nil {
		return nil, fmt.Errorf("unresolvable $ref %q", r.Ref)
	}
	return c.defs[name], nil
}

// methodDescriptor is an entry of the schema's methods or notifications.
type methodDescriptor struct {
	Params *refObject `json:"params"`
	Result *refObject `json:"result"`
}

type refObject struct {
	Ref string `json:"$ref"`
}

// HasRequest reports whether method is a client-to-server request mspd serves.
func (v *Validator) HasRequest(method string) bool {
	_, ok := v.c.requests[method]
	return ok
}

// HasNotification reports whether method is a notification mspd sends or
// accepts.
func (v *Validator) HasNotification(method string) bool {
	_, ok := v.c.notifications[method]
	return ok
}

// HasServerRequest reports whether method is a server-to-client request
// mspd sends (approval/request).
func (v *Validator) HasServerRequest(method string) bool {
	_, ok := v.c.asks[method]
	return ok
}

// Params validates the params of a request (either way) or notification.
// Absent (nil or empty) params are validated as {}, as MSP reads them.
func (v *Validator) Params(method string, params json.RawMessage) []FieldError {
	ms, ok := v.c.method(method)
	if !ok {
		if ms, ok = v.c.notifications[method]; !ok {
			return []FieldError{{Message: fmt.Sprintf("unknown method %q", method)}}
		}
	}
	if len(bytes.TrimSpace(params)) == 0 {
		params = json.RawMessage("{}")
	}
	inst, errs := decode(params)
	if errs != nil {
		return errs
	}
	return validateParams(ms.params, inst, "")
}

// method finds a request method, client to server or server to client:
// their names never meet.
func (c *compiled) method(name string) (methodSchemas, bool) {
	if ms, ok := c.requests[name]; ok {
		return ms, true
	}
	ms, ok := c.asks[name]
	return ms, ok
}

// Result validates the result of a request method (either way).
func (v *Validator) Result(method string, result json.RawMessage) []FieldError {
	ms, ok := v.c.method(method)
	if !ok {
		return []FieldError{{Message: fmt.Sprintf("unknown request method %q", method)}}
	}
	inst, errs := decode(result)
	if errs != nil {
		return errs
	}
	return validate(ms.result, inst, "")
}

// Def validates doc against the named $defs entry of the schema, such as
// "Session" or "TurnCompletedParams".
func (v *Validator) Def(name string, doc json.RawMessage) []FieldError {
	sch, ok := v.c.defs[name]
	if !ok {
		return []FieldError{{Message: fmt.Sprintf("unknown schema definition %q", name)}}
	}
	inst, errs := decode(doc)
	if errs != nil {
		return errs
	}
	return validate(sch, inst, "")
}

// FrameChecker validates whole frames of one connection. It remembers the
// method of each request it has seen, by id, so that a later success
// response's result is checked against that method's result schema.
//
// One id table serves both directions: mspd's server-to-client requests
// take string ids of their own ("mspd-1"), which its clients' numeric ids
// never equal. A FrameChecker is safe for concurrent use.
type FrameChecker struct {
	v       *Validator
	mu      sync.Mutex
	pending map[string]string // request id as JSON text → method
}

// NewFrameChecker returns a FrameChecker with no remembered requests.
func (v *Validator) NewFrameChecker() *FrameChecker {
	return &FrameChecker{v: v, pending: make(map[string]string)}
}

// Check validates one whole frame (without its line terminator) and returns
// every failure, with fields pathed from the frame root ("params.turnId").
//
// Beyond the schema it enforces mspd's framing rules: the frame is valid
// UTF-8, contains no raw line break, and is a single JSON object; an error
// response carries error.data.kind; item/delta carries no sourceRange.
func (c *FrameChecker) Check(frame []byte) []FieldError {
	var errs []FieldError
	if !utf8.Valid(frame) {
		errs = append(errs, FieldError{Message: "frame is not valid UTF-8"})
	}
	if bytes.ContainsAny(frame, "\r\n") {
		errs = append(errs, FieldError{Message: "frame contains a raw line break"})
	}
	inst, perrs := decode(frame)
	if perrs != nil {
		return append(errs, perrs...)
	}
	obj, ok := inst.(map[string]any)
	if !ok {
		return append(errs, FieldError{Message: "frame must be a JSON object"})
	}
	defs := c.v.c.defs
	_, hasID := obj["id"]
	rawMethod, hasMethod := obj["method"]
	// A non-string method still makes the frame a request or notification;
	// the envelope schema reports the bad type.
	method, methodOK := rawMethod.(string)
	switch {
	case hasMethod && hasID:
		errs = append(errs, validate(defs["Request"], obj, "")...)
		if !methodOK {
			break
		}
		if key, ok := idKey(obj["id"]); ok {
			c.remember(key, method)
		}
		ms, known := c.v.c.method(method)
		if !known {
			errs = append(errs, FieldError{"method", fmt.Sprintf("unknown request method %q", method)})
			break
		}
		errs = append(errs, frameParams(ms.params, obj)...)
	case hasMethod:
		errs = append(errs, validate(defs["Notification"], obj, "")...)
		if !methodOK {
			break
		}
		ms, known := c.v.c.notifications[method]
		if !known {
			errs = append(errs, FieldError{"method", fmt.Sprintf("unknown notification method %q", method)})
			break
		}
		errs = append(errs, frameParams(ms.params, obj)...)
		if p, ok := obj["params"].(map[string]any); ok && method == NotifyItemDelta {
			if _, ok := p["sourceRange"]; ok {
				errs = append(errs, FieldError{"params.sourceRange", "item/delta must not carry sourceRange"})
			}
		}
	case hasID:
		errs = append(errs, c.checkResponse(obj)...)
	default:
		errs = append(errs, FieldError{Message: "frame is not a request, notification or response (no method and no id)"})
	}
	return sortErrors(errs)
}

func (c *FrameChecker) checkResponse(obj map[string]any) []FieldError {
	defs := c.v.c.defs
	result, hasResult := obj["result"]
	errObj, hasError := obj["error"]
	var method string
	if key, ok := idKey(obj["id"]); ok {
		// A request is answered exactly once, so its id can be forgotten
		// (and later reused) once the response is seen.
		method = c.forget(key)
	}
	switch {
	case hasResult && hasError:
		return []FieldError{{Message: "response carries both result and error"}}
	case hasResult:
		errs := validate(defs["SuccessResponse"], obj, "")
		if ms, ok := c.v.c.method(method); ok && ms.result != nil {
			if _, isObj := result.(map[string]any); isObj {
				errs = append(errs, validate(ms.result, result, "result")...)
			}
		}
		return errs
	case hasError:
		errs := validate(defs["ErrorResponse"], obj, "")
		// The schema leaves data optional; mspd always sends data.kind and
		// clients (the TS SDK among them) require it.
		if e, ok := errObj.(map[string]any); ok {
			if _, ok := e["data"]; !ok {
				errs = append(errs, FieldError{"error.data", "required (mspd errors always carry data.kind)"})
			}
		}
		return errs
	default:
		return []FieldError{{Message: "response carries neither result nor error"}}
	}
}

func (c *FrameChecker) remember(key, method string) {
	c.mu.Lock()
	c.pending[key] = method
	c.mu.Unlock()
}

func (c *FrameChecker) forget(key string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	method := c.pending[key]
	delete(c.pending, key)
	return method
}

// idKey returns the JSON text of a request id, which keeps 1 and "1" apart.
func idKey(id any) (string, bool) {
	switch id.(type) {
	case string, json.Number:
		b, err := json.Marshal(id)
		return string(b), err == nil
	}
	return "", false
}

// frameParams validates a frame's params member; an absent one counts as {}.
// A present non-object is left to the envelope schema, which reports it.
func frameParams(sch *jsonschema.Schema, frame map[string]any) []FieldError {
	p, ok := frame["params"]
	if !ok {
		p = map[string]any{}
	} else if _, isObj := p.(map[string]any); !isObj {
		return nil
	}
	return validateParams(sch, p, "params")
}

// validateParams validates params against sch, or, when the method declares
// no params (initialized), only checks that they are an object.
func validateParams(sch *jsonschema.Schema, inst any, prefix string) []FieldError {
	if sch != nil {
		return validate(sch, inst, prefix)
	}
	if _, ok := inst.(map[string]any); !ok {
		return []FieldError{{prefix, "must be an object"}}
	}
	return nil
}

// decode parses one JSON value, keeping numbers exact so that 2.5 is not an
// integer and 1e400 is not silently rounded.
func decode(b []byte) (any, []FieldError) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, []FieldError{{Message: "not a single JSON value: " + err.Error()}}
	}
	return v, nil
}

// ValidationErrors turns an error returned by (*jsonschema.Schema).Validate
// into FieldErrors worded like the validator's own, for code that checks
// documents against schemas other than MSP's (a turn's responseSchema).
func ValidationErrors(err error) []FieldError {
	if err == nil {
		return nil
	}
	return fieldErrors(err, "")
}

func validate(sch *jsonschema.Schema, inst any, prefix string) []FieldError {
	err := sch.Validate(inst)
	if err == nil {
		return nil
	}
	return fieldErrors(err, prefix)
}

func fieldErrors(err error, prefix string) []FieldError {
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return []FieldError{{prefix, err.Error()}}
	}
	var out []FieldError
	collect(ve, prefix, &out)
	return sortErrors(out)
}

// collect flattens a jsonschema error tree into one FieldError per leaf,
// placed at the leaf's (deepest) instance location.
func collect(ve *jsonschema.ValidationError, prefix string, out *[]FieldError) {
	field := joinPath(prefix, ve.InstanceLocation)
	switch k := ve.ErrorKind.(type) {
	case *kind.Required:
		for _, m := range k.Missing {
			*out = append(*out, FieldError{joinPath(field, []string{m}), "required"})
		}
		return
	case *kind.DependentRequired:
		for _, m := range k.Missing {
			*out = append(*out, FieldError{joinPath(field, []string{m}), fmt.Sprintf("required when %s is present", k.Prop)})
		}
		return
	case *kind.AnyOf, *kind.OneOf:
		if collectAlternatives(ve, field, prefix, out) {
			return
		}
	}
	if len(ve.Causes) == 0 {
		*out = append(*out, FieldError{field, message(ve.ErrorKind)})
		return
	}
	for _, cause := range ve.Causes {
		collect(cause, prefix, out)
	}
}

// collectAlternatives reports a failed anyOf/oneOf. Alternatives that failed
// only because the value has another type say little when another
// alternative got further, so they are dropped; if every alternative failed
// on type alone, one message lists the accepted types ("must be string or
// null, not integer").
func collectAlternatives(ve *jsonschema.ValidationError, field, prefix string, out *[]FieldError) bool {
	if len(ve.Causes) == 0 {
		return false
	}
	var want []string
	var got string
	var deeper []*jsonschema.ValidationError
	for _, cause := range ve.Causes {
		if t := typeMismatch(cause, ve.InstanceLocation); t != nil {
			want = append(want, t.Want...)
			got = t.Got
			continue
		}
		deeper = append(deeper, cause)
	}
	if len(deeper) > 0 {
		deeper = discriminated(deeper, ve.InstanceLocation, field, out)
		for _, cause := range deeper {
			collect(cause, prefix, out)
		}
		return true
	}
	*out = append(*out, FieldError{field, fmt.Sprintf("must be %s, not %s", orList(want), got)})
	return true
}

// discriminated narrows the failed alternatives of a union discriminated
// by a const member (SessionMcpServerConfig's transport): the alternative
// whose discriminator matched is the one the sender meant, so only its
// findings are reported. When none matched, the discriminator alone is
// reported, once, listing the values it may take, and no alternative is
// left to report.
func discriminated(alts []*jsonschema.ValidationError, loc []string, field string, out *[]FieldError) []*jsonschema.ValidationError {
	var meant []*jsonschema.ValidationError
	var want []string
	member := ""
	for _, alt := range alts {
		c, name := constMismatch(alt, loc)
		if c == nil {
			meant = append(meant, alt)
			continue
		}
		want = append(want, display(c.Want))
		member = name
	}
	switch {
	case len(want) == 0:
		return alts // not a discriminated union
	case len(meant) > 0:
		return meant
	}
	*out = append(*out, FieldError{joinPath(field, []string{member}), "must be " + orList(want)})
	return nil
}

// constMismatch finds, in one alternative's findings, a const that a
// member of the object at loc failed, and that member's name.
func constMismatch(ve *jsonschema.ValidationError, loc []string) (*kind.Const, string) {
	if c, ok := ve.ErrorKind.(*kind.Const); ok && len(ve.InstanceLocation) == len(loc)+1 && slices.Equal(ve.InstanceLocation[:len(loc)], loc) {
		return c, ve.InstanceLocation[len(loc)]
	}
	for _, cause := range ve.Causes {
		if c, name := constMismatch(cause, loc); c != nil {
			return c, name
		}
	}
	return nil, ""
}

// typeMismatch returns the type error of an alternative whose only failure
// is a type mismatch at loc, looking through $ref wrappers.
func typeMismatch(ve *jsonschema.ValidationError, loc []string) *kind.Type {
	for {
		if t, ok := ve.ErrorKind.(*kind.Type); ok && len(ve.Causes) == 0 && slices.Equal(ve.InstanceLocation, loc) {
			return t
		}
		if len(ve.Causes) != 1 {
			return nil
		}
		ve = ve.Causes[0]
	}
}

// message words a leaf error briefly.
func message(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Type:
		return fmt.Sprintf("must be %s, not %s", orList(k.Want), k.Got)
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = fmt.Sprint(w)
		}
		if len(want) == 1 {
			return fmt.Sprintf("must be %q", want[0])
		}
		return fmt.Sprintf("%s is not one of %s", display(k.Got), strings.Join(want, ", "))
	case *kind.Const:
		return fmt.Sprintf("must be %s", display(k.Want))
	case *kind.Minimum:
		return "must be >= " + ratString(k.Want)
	case *kind.Maximum:
		return "must be <= " + ratString(k.Want)
	case *kind.ExclusiveMinimum:
		return "must be > " + ratString(k.Want)
	case *kind.ExclusiveMaximum:
		return "must be < " + ratString(k.Want)
	case *kind.MinItems:
		if k.Want == 1 {
			return "must not be empty"
		}
		return fmt.Sprintf("must have at least %d items", k.Want)
	case *kind.MaxItems:
		return fmt.Sprintf("must have at most %d items", k.Want)
	case *kind.MinLength:
		if k.Want == 1 {
			return "must not be empty"
		}
		return fmt.Sprintf("must be at least %d characters", k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d characters", k.Want)
	case *kind.Pattern:
		if k.Want == uuidPattern {
			return fmt.Sprintf("%q is not a UUID", k.Got)
		}
		return fmt.Sprintf("%q does not match %s", k.Got, k.Want)
	case *kind.FalseSchema:
		return "not allowed"
	}
	return "fails " + strings.Join(k.KeywordPath(), "/")
}

func display(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func ratString(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	return r.FloatString(6)
}

// orList joins alternatives as "a", "a or b", "a, b or c".
func orList(alts []string) string {
	alts = slices.Compact(slices.Clone(alts))
	if len(alts) <= 1 {
		return strings.Join(alts, "")
	}
	return strings.Join(alts[:len(alts)-1], ", ") + " or " + alts[len(alts)-1]
}

func joinPath(prefix string, tokens []string) string {
	if len(tokens) == 0 {
		return prefix
	}
	p := strings.Join(tokens, ".")
	if prefix == "" {
		return p
	}
	return prefix + "." + p
}

// sortErrors orders errors by field and drops duplicates, so results do not
// depend on the order the validator visited properties in.
func sortErrors(errs []FieldError) []FieldError {
	if len(errs) == 0 {
		return nil
	}
	slices.SortFunc(errs, func(a, b FieldError) int {
		if c := strings.Compare(a.Field, b.Field); c != 0 {
			return c
		}
		return strings.Compare(a.Message, b.Message)
	})
	return slices.Compact(errs)
}
