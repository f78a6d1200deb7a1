// Package logquery evaluates Cloud Logging's query language, and the
// extractors of log-based metrics, against log entries, for tests of what
// Terraform provisions against the lines the code really logs. It
// implements the subset fleetcast's filters use, by the rules of
// https://cloud.google.com/logging/docs/view/logging-query-language, and
// refuses the rest rather than guess:
//
//   - comparisons FIELD OP VALUE with OP one of = (equals), : (has: a
//     substring; :* the field exists), =~ and !~ (RE2, unanchored), and
//     <, <=, >, >= (numbers, and severities in LogSeverity's order);
//     a VALUE is a quoted string, a bare word or number, or a
//     parenthesized list of values joined by OR or AND;
//   - NOT (or -), which binds tightest; OR, which binds tighter than AND;
//     AND, explicit or by juxtaposition; parentheses;
//   - string comparisons ignore case, regular expressions do not; a
//     comparison on a field the entry lacks is false, and so NOT of it true.
//
// Global restrictions (a bare value), != and functions such as SEARCH are
// refused. FromStructuredLine turns one JSON line of a program's stdout into
// the LogEntry that Cloud Run's logging agent writes for it.
package logquery

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Entry is a LogEntry in its JSON form: "jsonPayload", "resource",
// "severity", "logName", "httpRequest", "trace", …
type Entry map[string]any

// Filter is a parsed query.
type Filter struct {
	src  string
	root node
}

// String is the query as written.
func (f *Filter) String() string { return f.src }

// Match reports whether the entry satisfies the query.
func (f *Filter) Match(e Entry) bool { return f.root.eval(e) }

type node interface{ eval(Entry) bool }

type and []node
type or []node
type not struct{ n node }

func (a and) eval(e Entry) bool {
	for _, n := range a {
		if !n.eval(e) {
			return false
		}
	}
	return true
}

func (o or) eval(e Entry) bool {
	for _, n := range o {
		if n.eval(e) {
			return true
		}
	}
	return false
}

func (n not) eval(e Entry) bool { return !n.n.eval(e) }

// comparison is FIELD OP a value, or a list of values joined by OR / AND.
type comparison struct {
	path   []string
	op     string
	values []string // one, or the list's
	all    bool     // the list was joined by AND
	res    []*regexp.Regexp
}

func (c *comparison) eval(e Entry) bool {
	v, ok := Lookup(e, c.path)
	if !ok {
		return false
	}
	for i, want := range c.values {
		m := c.one(v, want, i)
		if c.all && !m {
			return false
		}
		if !c.all && m {
			return true
		}
	}
	return c.all
}

// severities is LogSeverity's order.
var severities = map[string]int{"DEFAULT": 0, "DEBUG": 100, "INFO": 200, "NOTICE": 300, "WARNING": 400, "ERROR": 500, "CRITICAL": 600, "ALERT": 700, "EMERGENCY": 800}

func (c *comparison) one(v any, want string, i int) bool {
	s := scalar(v)
	switch c.op {
	case ":":
		if want == "*" {
			return true
		}
		return strings.Contains(strings.ToLower(s), strings.ToLower(want))
	case "=":
		if a, b, ok := numbers(v, want); ok {
			return a == b
		}
		return strings.EqualFold(s, want)
	case "=~":
		return c.res[i].MatchString(s)
	case "!~":
		return !c.res[i].MatchString(s)
	}
	var a, b float64
	if c.path[0] == "severity" && len(c.path) == 1 {
		sa, oka := severities[strings.ToUpper(s)]
		sb, okb := severities[strings.ToUpper(want)]
		if !oka || !okb {
			return false
		}
		a, b = float64(sa), float64(sb)
	} else {
		var ok bool
		if a, b, ok = numbers(v, want); !ok {
			return false
		}
	}
	switch c.op {
	case "<":
		return a < b
	case "<=":
		return a <= b
	case ">":
		return a > b
	default: // ">="
		return a >= b
	}
}

func numbers(v any, want string) (float64, float64, bool) {
	b, err := strconv.ParseFloat(want, 64)
	if err != nil {
		return 0, 0, false
	}
	switch v := v.(type) {
	case float64:
		return v, b, true
	case string:
		a, err := strconv.ParseFloat(v, 64)
		return a, b, err == nil
	}
	return 0, 0, false
}

// scalar is a value as the query language compares it: strings as they
// are, numbers and booleans as JSON writes them, objects as their JSON.
func scalar(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case nil:
		return ""
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// Lookup follows a field path through the entry.
func Lookup(e Entry, path []string) (any, bool) {
	var cur any = map[string]any(e)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// Parse parses a query.
func Parse(src string) (*Filter, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", src, err)
	}
	p := &parser{toks: toks}
	n, err := p.conjunction()
	if err == nil && p.pos < len(p.toks) {
		err = fmt.Errorf("unexpected %q", p.toks[p.pos].text)
	}
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", src, err)
	}
	return &Filter{src: src, root: n}, nil
}

type token struct {
	kind string // "word", "string", "op", "(", ")", "-"
	text string
}

func lex(s string) ([]token, error) {
	var out []token
	rs := []rune(s)
	for i := 0; i < len(rs); {
		r := rs[i]
		switch {
		case unicode.IsSpace(r):
			i++
		case r == '(' || r == ')':
			out = append(out, token{kind: string(r), text: string(r)})
			i++
		case r == '"':
			var b strings.Builder
			j := i + 1
			for ; j < len(rs) && rs[j] != '"'; j++ {
				if rs[j] == '\\' && j+1 < len(rs) {
					j++
				}
				b.WriteRune(rs[j])
			}
			if j >= len(rs) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			out = append(out, token{kind: "string", text: b.String()})
			i = j + 1
		case strings.ContainsRune("=:<>!~", r):
			j := i + 1
			for j < len(rs) && strings.ContainsRune("=<>~", rs[j]) {
				j++
			}
			op := string(rs[i:j])
			switch op {
			case "=", ":", "=~", "!~", "<", "<=", ">", ">=":
			default:
				return nil, fmt.Errorf("operator %q is not in the subset this package implements", op)
			}
			out = append(out, token{kind: "op", text: op})
			i = j
		case r == '-' && (len(out) == 0 || out[len(out)-1].kind != "op"):
			out = append(out, token{kind: "-", text: "-"})
			i++
		default:
			j := i
			for j < len(rs) && !unicode.IsSpace(rs[j]) && !strings.ContainsRune("()\"=:<>!~", rs[j]) {
				j++
			}
			out = append(out, token{kind: "word", text: string(rs[i:j])})
			i = j
		}
	}
	return out, nil
}

type parser struct {
	toks []token
	pos  int
}

func (p *parser) peek() (token, bool) {
	if p.pos < len(p.toks) {
		return p.toks[p.pos], true
	}
	return token{}, false
}

func (p *parser) keyword(k string) bool {
	if t, ok := p.peek(); ok && t.kind == "word" && t.text == k {
		p.pos++
		return true
	}
	return false
}

// conjunction = disjunction { ["AND"] disjunction }
func (p *parser) conjunction() (node, error) {
	var out and
	for {
		n, err := p.disjunction()
		if err != nil {
			return nil, err
		}
		out = append(out, n)
		p.keyword("AND")
		if t, ok := p.peek(); !ok || t.kind == ")" {
			break
		}
	}
	if len(out) == 1 {
		return out[0], nil
	}
	return out, nil
}

// disjunction = unary { "OR" unary }
func (p *parser) disjunction() (node, error) {
	var out or
	for {
		n, err := p.unary()
		if err != nil {
			return nil, err
		}
		out = append(out, n)
		if !p.keyword("OR") {
			break
		}
	}
	if len(out) == 1 {
		return out[0], nil
	}
	return out, nil
}

// unary = ("NOT" | "-") unary | "(" conjunction ")" | comparison
func (p *parser) unary() (node, error) {
	t, ok := p.peek()
	if !ok {
		return nil, fmt.Errorf("a comparison is missing at the end")
	}
	switch {
	case t.kind == "word" && t.text == "NOT", t.kind == "-":
		p.pos++
		n, err := p.unary()
		return not{n}, err
	case t.kind == "(":
		p.pos++
		n, err := p.conjunction()
		if err != nil {
			return nil, err
		}
		if t, ok := p.peek(); !ok || t.kind != ")" {
			return nil, fmt.Errorf("a ) is missing")
		}
		p.pos++
		return n, nil
	case t.kind == "word":
		return p.comparison()
	}
	return nil, fmt.Errorf("unexpected %q: a global restriction (a bare value) is not in the subset this package implements", t.text)
}

func (p *parser) comparison() (node, error) {
	field := p.toks[p.pos].text
	p.pos++
	path, err := splitPath(field)
	if err != nil {
		return nil, err
	}
	op, ok := p.peek()
	if !ok || op.kind != "op" {
		return nil, fmt.Errorf("%s: a comparison operator is missing (a bare value is a global restriction, not in the subset this package implements)", field)
	}
	p.pos++
	c := &comparison{path: path, op: op.text}
	t, ok := p.peek()
	switch {
	case !ok:
		return nil, fmt.Errorf("%s %s: a value is missing", field, op.text)
	case t.kind == "(":
		p.pos++
		joiner := ""
		for {
			v, ok := p.peek()
			if !ok || (v.kind != "string" && v.kind != "word") {
				return nil, fmt.Errorf("%s %s (…): a value is missing", field, op.text)
			}
			p.pos++
			c.values = append(c.values, v.text)
			if p.keyword("OR") || p.keyword("AND") {
				j := p.toks[p.pos-1].text
				if joiner != "" && joiner != j {
					return nil, fmt.Errorf("%s %s (…): mixes OR and AND", field, op.text)
				}
				joiner = j
				continue
			}
			break
		}
		if t, ok := p.peek(); !ok || t.kind != ")" {
			return nil, fmt.Errorf("%s %s (…): a ) is missing", field, op.text)
		}
		p.pos++
		c.all = joiner == "AND"
	case t.kind == "string" || t.kind == "word":
		p.pos++
		c.values = []string{t.text}
	default:
		return nil, fmt.Errorf("%s %s: unexpected %q", field, op.text, t.text)
	}
	if c.op == "=~" || c.op == "!~" {
		for _, v := range c.values {
			re, err := regexp.Compile(v)
			if err != nil {
				return nil, fmt.Errorf("%s %s %q: %w", field, op.text, v, err)
			}
			c.res = append(c.res, re)
		}
	}
	return c, nil
}

// splitPath splits a.b."c.d" into its segments.
func splitPath(s string) ([]string, error) {
	var out []string
	for _, seg := range strings.Split(s, ".") {
		if seg == "" {
			return nil, fmt.Errorf("field %q: an empty segment (quoted segments are not in the subset this package implements)", s)
		}
		out = append(out, seg)
	}
	return out, nil
}

// Extractor is a log-based metric's value or label extractor:
// EXTRACT(field) or REGEXP_EXTRACT(field, "regex with one group").
type Extractor struct {
	src  string
	path []string
	re   *regexp.Regexp
}

var extractRE = regexp.MustCompile(`^(EXTRACT|REGEXP_EXTRACT)\(\s*([A-Za-z0-9_.]+)\s*(?:,\s*"((?:[^"\\]|\\.)*)"\s*)?\)$`)

// ParseExtractor parses an extractor expression.
func ParseExtractor(src string) (*Extractor, error) {
	m := extractRE.FindStringSubmatch(strings.TrimSpace(src))
	if m == nil {
		return nil, fmt.Errorf("extractor %q: want EXTRACT(field) or REGEXP_EXTRACT(field, \"regex\")", src)
	}
	path, err := splitPath(m[2])
	if err != nil {
		return nil, err
	}
	x := &Extractor{src: src, path: path}
	if m[1] == "REGEXP_EXTRACT" {
		pattern, err := strconv.Unquote(`"` + m[3] + `"`)
		if err != nil {
			return nil, fmt.Errorf("extractor %q: %w", src, err)
		}
		if x.re, err = regexp.Compile(pattern); err != nil {
			return nil, fmt.Errorf("extractor %q: %w", src, err)
		}
		if x.re.NumSubexp() != 1 {
			return nil, fmt.Errorf("extractor %q: the regular expression must have exactly one capture group", src)
		}
	} else if m[3] != "" {
		return nil, fmt.Errorf("extractor %q: EXTRACT takes one field", src)
	}
	return x, nil
}

// Extract returns what the extractor takes from the entry, and whether it
// found anything.
func (x *Extractor) Extract(e Entry) (string, bool) {
	v, ok := Lookup(e, x.path)
	if !ok {
		return "", false
	}
	s := scalar(v)
	if x.re == nil {
		return s, true
	}
	m := x.re.FindStringSubmatch(s)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// special are the fields of a structured line that Cloud Logging's agents
// move out of jsonPayload into the entry (the structured logging guide's
// "special JSON fields"), by the entry field each becomes.
var special = map[string]string{
	"severity":                              "severity",
	"httpRequest":                           "httpRequest",
	"time":                                  "timestamp",
	"timestamp":                             "timestamp",
	"logging.googleapis.com/insertId":       "insertId",
	"logging.googleapis.com/labels":         "labels",
	"logging.googleapis.com/operation":      "operation",
	"logging.googleapis.com/sourceLocation": "sourceLocation",
	"logging.googleapis.com/spanId":         "spanId",
	"logging.googleapis.com/trace":          "trace",
	"logging.googleapis.com/trace_sampled":  "traceSampled",
}

// FromStructuredLine is the entry Cloud Run's logging agent writes for one
// line of a container's stdout: the JSON object becomes jsonPayload, but
// for the special fields, which become the entry's own ("message" stays in
// jsonPayload); a line that is no JSON object is a textPayload. resource
// and logName are the entry's.
func FromStructuredLine(line []byte, resource map[string]any, logName string) Entry {
	e := Entry{"resource": resource, "logName": logName, "severity": "DEFAULT"}
	var obj map[string]any
	if err := json.Unmarshal(line, &obj); err != nil {
		e["textPayload"] = string(line)
		return e
	}
	for k, field := range special {
		if v, ok := obj[k]; ok {
			e[field] = v
			delete(obj, k)
		}
	}
	e["jsonPayload"] = obj
	return e
}
