package builtin

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Bounds of an expression Calculate accepts.
const (
	maxExpressionLen = 1000
	maxDepth         = 64
)

// Calculate evaluates an arithmetic expression of numbers, + - * / ^ and
// parentheses. ^ binds tightest and groups to the right (2^3^2 = 2^9), a
// sign binds looser than ^ (-2^2 = -4), and * / before + -, each left to
// right. Division by zero and results too large for a float64 are errors.
func Calculate(expr string) (float64, error) {
	if len(expr) > maxExpressionLen {
		return 0, fmt.Errorf("the expression is longer than %d characters", maxExpressionLen)
	}
	p := &parser{s: expr}
	p.skipSpace()
	if p.pos == len(p.s) {
		return 0, errors.New("the expression is empty")
	}
	v, err := p.sum()
	if err != nil {
		return 0, err
	}
	if p.pos < len(p.s) {
		return 0, p.errorf("unexpected %q", p.s[p.pos])
	}
	return v, nil
}

// parser is a recursive-descent parser over the expression's bytes.
type parser struct {
	s     string
	pos   int
	depth int
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("at character %d: %s", p.pos+1, fmt.Sprintf(format, args...))
}

func (p *parser) skipSpace() {
	for p.pos < len(p.s) && (p.s[p.pos] == ' ' || p.s[p.pos] == '\t' || p.s[p.pos] == '\n') {
		p.pos++
	}
}

// peek returns the next byte after blanks, or 0 at the end.
func (p *parser) peek() byte {
	p.skipSpace()
	if p.pos == len(p.s) {
		return 0
	}
	return p.s[p.pos]
}

// sum = product { ("+" | "-") product }
func (p *parser) sum() (float64, error) {
	v, err := p.product()
	for err == nil {
		op := p.peek()
		if op != '+' && op != '-' {
			break
		}
		p.pos++
		var w float64
		if w, err = p.product(); err == nil {
			if op == '+' {
				v, err = p.finite(v + w)
			} else {
				v, err = p.finite(v - w)
			}
		}
	}
	return v, err
}

// product = unary { ("*" | "/") unary }
func (p *parser) product() (float64, error) {
	v, err := p.unary()
	for err == nil {
		op := p.peek()
		if op != '*' && op != '/' {
			break
		}
		at := p.pos
		p.pos++
		var w float64
		if w, err = p.unary(); err == nil {
			switch {
			case op == '*':
				v, err = p.finite(v * w)
			case w == 0:
				p.pos = at
				err = p.errorf("division by zero")
			default:
				v, err = p.finite(v / w)
			}
		}
	}
	return v, err
}

// unary = ("+" | "-") unary | power
func (p *parser) unary() (float64, error) {
	if err := p.enter(); err != nil {
		return 0, err
	}
	defer p.leave()
	switch p.peek() {
	case '-':
		p.pos++
		v, err := p.unary()
		return -v, err
	case '+':
		p.pos++
		return p.unary()
	}
	return p.power()
}

// power = primary [ "^" unary ]
func (p *parser) power() (float64, error) {
	base, err := p.primary()
	if err != nil || p.peek() != '^' {
		return base, err
	}
	at := p.pos
	p.pos++
	exp, err := p.unary()
	if err != nil {
		return 0, err
	}
	v := math.Pow(base, exp)
	if math.IsNaN(v) {
		p.pos = at
		return 0, p.errorf("%g^%g is not a real number", base, exp)
	}
	if math.IsInf(v, 0) && base == 0 {
		p.pos = at
		return 0, p.errorf("division by zero")
	}
	return p.finite(v)
}

// primary = number | "(" sum ")"
func (p *parser) primary() (float64, error) {
	switch c := p.peek(); {
	case c == '(':
		p.pos++
		v, err := p.sum()
		if err != nil {
			return 0, err
		}
		if p.peek() != ')' {
			return 0, p.errorf("missing )")
		}
		p.pos++
		return v, nil
	case c >= '0' && c <= '9' || c == '.':
		return p.number()
	case c == 0:
		return 0, p.errorf("the expression ends where a number belongs")
	default:
		return 0, p.errorf("unexpected %q", c)
	}
}

// number reads digits with an optional fraction and exponent (1.5e3).
func (p *parser) number() (float64, error) {
	start := p.pos
	digits := func() {
		for p.pos < len(p.s) && p.s[p.pos] >= '0' && p.s[p.pos] <= '9' {
			p.pos++
		}
	}
	digits()
	if p.pos < len(p.s) && p.s[p.pos] == '.' {
		p.pos++
		digits()
	}
	if p.pos < len(p.s) && (p.s[p.pos] == 'e' || p.s[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.s) && (p.s[p.pos] == '+' || p.s[p.pos] == '-') {
			p.pos++
		}
		digits()
	}
	text := p.s[start:p.pos]
	v, err := strconv.ParseFloat(text, 64)
	if errors.Is(err, strconv.ErrRange) && math.IsInf(v, 0) {
		return 0, errors.New("the result is too large")
	}
	if err != nil {
		p.pos = start
		return 0, p.errorf("%q is not a number", text)
	}
	return v, nil
}

func (p *parser) finite(v float64) (float64, error) {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, errors.New("the result is too large")
	}
	return v, nil
}

// enter bounds nesting, so that a long run of parentheses or signs cannot
// exhaust the stack.
func (p *parser) enter() error {
	p.depth++
	if p.depth > maxDepth {
		return p.errorf("nested more than %d deep", maxDepth)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }
