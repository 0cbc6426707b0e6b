package turn

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"mspd/schema/msp"
)

// Schema is a compiled response schema: the JSON Schema a turn's answer
// must satisfy.
type Schema struct{ s *jsonschema.Schema }

// CompileSchema compiles a turn's responseSchema. Session admission calls
// it so that a broken schema is refused at turn/start, not mid-turn.
func CompileSchema(raw json.RawMessage) (*Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("responseSchema is not JSON: %w", err)
	}
	if _, ok := doc.(map[string]any); !ok {
		return nil, errors.New("responseSchema must be a JSON Schema object")
	}
	c := jsonschema.NewCompiler()
	// The schema is the client's: its $refs may point only inside itself.
	// The default loader would read local files (file:// or a bare path)
	// and tell the client whether they exist.
	c.UseLoader(noLoader{})
	if err := c.AddResource("response.schema.json", doc); err != nil {
		return nil, fmt.Errorf("responseSchema: %w", err)
	}
	s, err := c.Compile("response.schema.json")
	if errors.Is(err, errExternalRef) || err != nil && strings.Contains(err.Error(), errExternalRef.Error()) {
		return nil, errExternalRef
	}
	if err != nil {
		return nil, fmt.Errorf("responseSchema does not compile: %w", err)
	}
	return &Schema{s: s}, nil
}

// errExternalRef refuses a $ref outside the schema, without saying more.
var errExternalRef = errors.New("responseSchema: a $ref may only point inside the schema")

// noLoader refuses every external resource.
type noLoader struct{}

func (noLoader) Load(string) (any, error) { return nil, errExternalRef }

// Check validates an answer: it must be JSON (optionally fenced as a
// Markdown code block, which models add) that satisfies the schema.
func (s *Schema) Check(answer string) error {
	text := strings.TrimSpace(answer)
	if strings.HasPrefix(text, "```") {
		text = strings.TrimPrefix(text, "```json")
		text = strings.TrimPrefix(text, "```")
		text = strings.TrimSuffix(strings.TrimSpace(text), "```")
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return errors.New("the answer is not valid JSON")
	}
	if errs := msp.ValidationErrors(s.s.Validate(inst)); len(errs) > 0 {
		fe := errs[0]
		if fe.Field == "" {
			return errors.New(fe.Message)
		}
		return fmt.Errorf("%s: %s", fe.Field, fe.Message)
	}
	return nil
}
