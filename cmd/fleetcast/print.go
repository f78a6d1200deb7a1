package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"
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
		name, _, _ := strings.Cut(o.format, "=")
		for _, f := range formats {
			if f == o.format || strings.HasSuffix(f, "=TEMPLATE") && name == strings.TrimSuffix(f, "=TEMPLATE") && strings.Contains(o.format, "=") {
				return nil
			}
		}
		return usagef("-o %s: not an output of %s (want %s)", o.format, c.CommandPath(), strings.Join(formats, ", "))
	}
}

// printObject prints v as JSON, YAML or a JSONPath template's result;
// ok is false for the other formats.
func printObject(w io.Writer, format string, v any) (ok bool, err error) {
	switch {
	case format == "json", format == "yaml":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return true, err
		}
		if format == "yaml" {
			if b, err = yaml.JSONToYAML(b); err != nil {
				return true, err
			}
			_, err = w.Write(b)
			return true, err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return true, err
	case strings.HasPrefix(format, "jsonpath="):
		return true, printJSONPath(w, strings.TrimPrefix(format, "jsonpath="), v)
	}
	return false, nil
}

// printJSONPath prints v through a kubectl JSONPath template, e.g.
// {.items[*].name} or {range .items[*]}{.name}{"\n"}{end}.
func printJSONPath(w io.Writer, template string, v any) error {
	if !strings.Contains(template, "{") {
		template = "{" + template + "}"
	}
	jp := jsonpath.New("output")
	if err := jp.Parse(template); err != nil {
		return usagef("-o jsonpath: %w", err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var data any
	if err := json.Unmarshal(b, &data); err != nil {
		return err
	}
	if err := jp.Execute(w, data); err != nil {
		return usagef("-o jsonpath: %w", err)
	}
	return nil // as kubectl: no newline of its own
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
