package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"
)

// output is a command's -o and --no-headers.
type output struct {
	format    string
	noHeaders bool
}

func (o output) wide() bool { return o.format == "wide" }

// outputFlag adds -o, with the formats the command prints, and
// --no-headers when it prints a table.
func outputFlag(cmd *cobra.Command, o *output, formats ...string) {
	cmd.Flags().StringVarP(&o.format, "output", "o", formats[0], "output: "+strings.Join(formats, ", "))
	if slices.Contains(formats, "table") {
		cmd.Flags().BoolVar(&o.noHeaders, "no-headers", false, "print tables without their header")
	}
	prev := cmd.PreRunE
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		if prev != nil {
			if err := prev(c, args); err != nil {
				return err
			}
		}
		name, _, templated := strings.Cut(o.format, "=")
		for _, f := range formats {
			if fname, _, ok := strings.Cut(f, "="); f == o.format || ok && templated && fname == name {
				return nil
			}
		}
		return usagef("-o %s: not an output of %s (want %s)", o.format, c.CommandPath(), strings.Join(formats, ", "))
	}
}

// templated are the outputs a template shapes, over the JSON output:
// cli-runtime's jsonpath and go-template printers, and custom-columns.
var templated = []string{"jsonpath=TEMPLATE", "go-template=TEMPLATE", "custom-columns=SPEC"}

// printObject prints v as JSON, YAML or through a template (templated);
// ok is false for the other formats.
func printObject(w io.Writer, out output, v any) (ok bool, err error) {
	name, tmpl, _ := strings.Cut(out.format, "=")
	switch name {
	case "json", "yaml":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return true, err
		}
		if name == "yaml" {
			if b, err = yaml.JSONToYAML(b); err != nil {
				return true, err
			}
			_, err = w.Write(b)
			return true, err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return true, err
	case "jsonpath", "go-template", "custom-columns":
		p, err := templatePrinter(name, tmpl, out.noHeaders)
		if err != nil {
			return true, usagef("-o %s: %w", name, err)
		}
		obj, err := unstructuredOf(v)
		if err != nil {
			return true, err
		}
		if err := p.PrintObj(obj, w); err != nil {
			return true, usagef("-o %s: %w", name, err)
		}
		return true, nil // as kubectl: no newline of its own
	}
	return false, nil
}

func templatePrinter(name, tmpl string, noHeaders bool) (printers.ResourcePrinter, error) {
	switch name {
	case "jsonpath":
		if !strings.Contains(tmpl, "{") {
			tmpl = "{" + tmpl + "}" // kubectl's relaxed form: .items[*].name
		}
		return printers.NewJSONPathPrinter(tmpl)
	case "go-template":
		return printers.NewGoTemplatePrinter([]byte(tmpl))
	}
	return newCustomColumns(tmpl, noHeaders)
}

// customColumns is kubectl's custom-columns printer, by its rules
// (HEADER:JSONPATH,…, kubectl's relaxed paths, <none> for a missing value,
// the values of a path that yields several joined by commas): kubectl's
// own lives in k8s.io/kubectl/pkg/cmd/get, which would bring 463 more
// packages into the CLI for it.
type customColumns struct {
	headers   []string
	paths     []*jsonpath.JSONPath
	noHeaders bool
}

func newCustomColumns(spec string, noHeaders bool) (*customColumns, error) {
	if spec == "" {
		return nil, fmt.Errorf("no columns given: want HEADER:JSONPATH,…")
	}
	c := &customColumns{noHeaders: noHeaders}
	for i, col := range strings.Split(spec, ",") {
		header, path, ok := strings.Cut(col, ":")
		if !ok {
			return nil, fmt.Errorf("%q: want HEADER:JSONPATH", col)
		}
		path = strings.TrimSpace(path)
		if !strings.HasPrefix(path, "{") {
			path = "{" + strings.TrimPrefix(path, "$") + "}"
		}
		if !strings.HasPrefix(path, "{.") && !strings.HasPrefix(path, "{$") {
			path = "{." + strings.TrimPrefix(path, "{")
		}
		jp := jsonpath.New(fmt.Sprintf("column%d", i)).AllowMissingKeys(true)
		if err := jp.Parse(path); err != nil {
			return nil, fmt.Errorf("%s: %w", header, err)
		}
		c.headers, c.paths = append(c.headers, header), append(c.paths, jp)
	}
	return c, nil
}

// PrintObj prints a row for obj, or for each item of a list.
func (c *customColumns) PrintObj(obj runtime.Object, w io.Writer) error {
	objs := []runtime.Object{obj}
	if list, ok := obj.(*unstructured.UnstructuredList); ok {
		objs = objs[:0]
		for i := range list.Items {
			objs = append(objs, &list.Items[i])
		}
	}
	var rows [][]string
	if !c.noHeaders {
		rows = append(rows, c.headers)
	}
	for _, o := range objs {
		row := make([]string, len(c.paths))
		for i, jp := range c.paths {
			results, err := jp.FindResults(o.(runtime.Unstructured).UnstructuredContent())
			if err != nil {
				return err
			}
			var values []string
			for _, r := range results {
				for _, v := range r {
					values = append(values, printers.EscapeTerminal(fmt.Sprint(v.Interface())))
				}
			}
			row[i] = orNone(strings.Join(values, ","))
		}
		rows = append(rows, row)
	}
	(&table{w: w}).rows(rows)
	return nil
}

// unstructuredOf is v's JSON as kubectl's printers take it: a list
// ({"items": […]}) as an UnstructuredList, anything else as one object.
func unstructuredOf(v any) (runtime.Object, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	items, isList := m["items"].([]any)
	if !isList {
		return &unstructured.Unstructured{Object: m}, nil
	}
	list := &unstructured.UnstructuredList{Object: map[string]any{}}
	for _, it := range items {
		obj, _ := it.(map[string]any)
		list.Items = append(list.Items, unstructured.Unstructured{Object: obj})
	}
	return list, nil
}

// table writes rows of cells padded to their columns, three spaces apart,
// as text/tabwriter does, but keeps each column's width from one write to
// the next: a watch's rows stay under the header they came with (a cell
// wider than its column widens it from then on).
type table struct {
	w      io.Writer
	widths []int
}

// row writes one row; the last cell is not padded.
func (t *table) row(cells ...string) {
	var b strings.Builder
	for i, c := range cells {
		if i == len(t.widths) {
			t.widths = append(t.widths, 0)
		}
		t.widths[i] = max(t.widths[i], utf8.RuneCountInString(c))
		b.WriteString(c)
		if i < len(cells)-1 {
			b.WriteString(strings.Repeat(" ", t.widths[i]-utf8.RuneCountInString(c)+3))
		}
	}
	b.WriteByte('\n')
	_, _ = io.WriteString(t.w, b.String())
}

// rows writes rows whose columns take the widest of their cells (and of
// what the table wrote before).
func (t *table) rows(rows [][]string) {
	for _, r := range rows {
		for i, c := range r {
			if i == len(t.widths) {
				t.widths = append(t.widths, 0)
			}
			t.widths[i] = max(t.widths[i], utf8.RuneCountInString(c))
		}
	}
	for _, r := range rows {
		t.row(r...)
	}
}

// age is how long before now t was, as kubectl prints AGE: 42s, 5m10s,
// 3h, 12d; <unknown> for no time, <invalid> for a time ahead of now by
// more than a second (a skewed clock).
func age(now, t time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t))
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func nonNilSlice[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
