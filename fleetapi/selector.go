package fleetapi

import (
	"slices"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// compiled is a parsed selector whose Matches reads each requirement's key
// from a labels.Set once: labels.Requirement.Matches asks Has, then Get
// (two map lookups a requirement), and a query at 10 000 fleets spent a
// third of its time there. Any other labels.Labels, and the operators
// that compare numbers (gt, lt), take labels' own path; every other
// method is the parsed selector's.
type compiled struct {
	labels.Selector
	reqs []requirement
}

type requirement struct {
	key    string
	op     selection.Operator
	values []string // sorted
	req    labels.Requirement
}

func compile(sel labels.Selector) labels.Selector {
	reqs, selectable := sel.Requirements()
	if !selectable {
		return sel
	}
	c := &compiled{Selector: sel, reqs: make([]requirement, len(reqs))}
	for i, r := range reqs {
		c.reqs[i] = requirement{key: r.Key(), op: r.Operator(), values: r.ValuesUnsorted(), req: r}
		slices.Sort(c.reqs[i].values)
	}
	return c
}

// Matches reports whether ls satisfies every requirement, as the parsed
// selector's Matches does.
func (c *compiled) Matches(ls labels.Labels) bool {
	set, ok := ls.(labels.Set)
	if !ok {
		return c.Selector.Matches(ls)
	}
	for i := range c.reqs {
		r := &c.reqs[i]
		v, has := set[r.key]
		var ok bool
		switch r.op {
		case selection.Equals, selection.DoubleEquals, selection.In:
			ok = has && r.holds(v)
		case selection.NotEquals, selection.NotIn:
			ok = !has || !r.holds(v)
		case selection.Exists:
			ok = has
		case selection.DoesNotExist:
			ok = !has
		default: // gt, lt: labels' own comparison of numbers
			ok = r.req.Matches(set)
		}
		if !ok {
			return false
		}
	}
	return true
}

func (r *requirement) holds(v string) bool {
	if len(r.values) <= 8 {
		return slices.Contains(r.values, v)
	}
	_, found := slices.BinarySearch(r.values, v)
	return found
}
