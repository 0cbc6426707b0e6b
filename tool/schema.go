package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// An inputSchema is a tool's compiled input schema.
//
// It is compiled with santhosh-tekuri/jsonschema (mspd's validator, which
// the turn's responseSchema uses too) rather than the go-sdk's
// google/jsonschema-go: servers declare every draft from 4 to 2020-12, and
// a refusal must name the failing field of the arguments (the instance
// location), which only the former reports.
type inputSchema struct{ s *jsonschema.Schema }

// errExternalRef refuses a schema that refers outside itself: a server's
// schema must not make mspd read files or fetch URLs.
var errExternalRef = errors.New("a $ref may only point inside the schema")

type noLoader struct{}

func (noLoader) Load(string) (any, error) { return nil, errExternalRef }

// compileInputSchema compiles a schema as tools/list returned it. Without
// "$schema" it is read as draft 2020-12, MCP's default.
func compileInputSchema(raw json.RawMessage) (*inputSchema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("input schema is not JSON: %w", err)
	}
	if _, ok := doc.(map[string]any); !ok {
		return nil, errors.New("input schema is not a JSON object")
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	if err := c.AddResource("input.schema.json", doc); err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	s, err := c.Compile("input.schema.json")
	if err != nil {
		return nil, fmt.Errorf("input schema does not compile: %w", err)
	}
	return &inputSchema{s: s}, nil
}

var printer = message.NewPrinter(language.English)

// check validates arguments; it returns the failing path and a message,
// or ok. Of several failures it reports the one at the first path, so the
// answer does not depend on the validator's order.
func (s *inputSchema) check(args json.RawMessage) (path, msg string, ok bool) {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return "", "not JSON", false
	}
	if _, isObject := inst.(map[string]any); !isObject {
		return "", "must be a JSON object", false
	}
	err = s.s.Validate(inst)
	if err == nil {
		return "", "", true
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return "", err.Error(), false
	}
	var leaves []fieldError
	collectLeaves(ve, &leaves)
	slices.SortFunc(leaves, func(a, b fieldError) int { return strings.Compare(a.path, b.path) })
	return leaves[0].path, leaves[0].msg, false
}

type fieldError struct{ path, msg string }

// collectLeaves flattens a validation error tree into its leaves, each at
// its instance location; a missing property is reported at its own path.
func collectLeaves(ve *jsonschema.ValidationError, out *[]fieldError) {
	if len(ve.Causes) > 0 {
		for _, c := range ve.Causes {
			collectLeaves(c, out)
		}
		return
	}
	path := strings.Join(ve.InstanceLocation, ".")
	if r, ok := ve.ErrorKind.(*kind.Required); ok && len(r.Missing) > 0 {
		for _, m := range r.Missing {
			*out = append(*out, fieldError{joinField(path, m), "required"})
		}
		return
	}
	*out = append(*out, fieldError{path, ve.ErrorKind.LocalizedString(printer)})
}

func joinField(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
