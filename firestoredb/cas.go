package firestoredb

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
)

// casAttempts bounds how often a compare-and-set reads again after another
// writer changed the document between its read and its write.
const casAttempts = 8

// errContention is returned when every attempt lost the race: transient,
// the message is delivered again.
var errContention = fmt.Errorf("document changed by another writer on each of %d attempts", casAttempts)

// compareAndSet writes the next state of one document, decided from its
// stored state, in at most two RPCs: a read, then a write whose
// precondition is that the document is as read (its update time, or its
// absence). When another writer came between them the precondition fails
// and it starts again from the read. decide returns nil to write nothing
// (one RPC); it sees nil when there is no document.
//
// This is what a transaction on one document gives, without its
// BeginTransaction RPC: a transaction commits only if what it read is
// unchanged, and so does the precondition.
//
// Its reads and writes are billed to by on s.
func compareAndSet[T any](ctx context.Context, s *Store, by cause, ref *firestore.DocumentRef,
	decode func(*firestore.DocumentSnapshot) (*T, error), decide func(stored *T) (*T, error)) (wrote bool, err error) {
	return compareAndSetFrom(ctx, s, by, ref, nil, decode, decide, nil)
}

// casState is what a compare-and-set left the document as, to its
// knowledge: its update time, and the stored fields its type does not
// have (a replacement deletes them); Exists false when there is none.
type casState struct {
	Exists     bool
	UpdateTime time.Time
	Extra      []string
}

// read is one read of a document: its snapshot and the error of Get.
type read struct {
	snap *firestore.DocumentSnapshot
	err  error
}

// getDoc reads ref, billed to by on s.
func getDoc(ctx context.Context, s *Store, by cause, ref *firestore.DocumentRef) read {
	snap, err := ref.Get(ctx)
	s.billed.read(by, 1) // a missing document's read is billed too
	return read{snap, err}
}

// compareAndSetFrom is compareAndSet starting from a read already made
// (nil: none), which costs nothing more when the document is unchanged
// since: the precondition checks it. known, if set, hears what the
// document is once it is decided: after a write, or a read that needed
// none.
func compareAndSetFrom[T any](ctx context.Context, s *Store, by cause, ref *firestore.DocumentRef, first *read,
	decode func(*firestore.DocumentSnapshot) (*T, error), decide func(stored *T) (*T, error), known func(casState)) (wrote bool, err error) {
	if known == nil {
		known = func(casState) {}
	}
	// 10 ms doubling to 500 ms, jittered by up to half: writers that
	// collided do not collide again in step.
	b := wait.Backoff{Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: casAttempts, Cap: 500 * time.Millisecond}
	for range casAttempts {
		r := first
		if r == nil {
			got := getDoc(ctx, s, by, ref)
			r = &got
		}
		first = nil
		snap, err := r.snap, r.err
		var stored *T
		switch {
		case status.Code(err) == codes.NotFound:
		case err != nil:
			return false, err
		default:
			if stored, err = decode(snap); err != nil {
				return false, err
			}
		}
		next, err := decide(stored)
		if err != nil {
			return false, err
		}
		if next == nil {
			if stored != nil {
				known(casState{Exists: true, UpdateTime: snap.UpdateTime, Extra: extraFields(next, snap.Data())})
			}
			return false, nil
		}
		var wr *firestore.WriteResult
		if snap != nil && snap.Exists() {
			wr, err = ref.Update(ctx, replacement(next, snap.Data()), firestore.LastUpdateTime(snap.UpdateTime))
		} else {
			wr, err = ref.Create(ctx, creation(next))
		}
		switch status.Code(err) {
		case codes.OK:
			s.billed.wrote(by, 1)
			known(casState{Exists: true, UpdateTime: wr.UpdateTime})
			return true, nil
		case codes.FailedPrecondition, codes.AlreadyExists, codes.NotFound:
			// Changed, created or deleted since the read.
		default:
			return false, err
		}
		select {
		case <-ctx.Done():
			return false, context.Cause(ctx)
		case <-time.After(b.Step()):
		}
	}
	return false, errContention
}

// replacement returns the updates that make a stored document exactly v,
// a struct written as Set would write it: each top-level field by its
// firestore tag (an omitempty field that is empty deleted, a
// serverTimestamp field stamped with the commit time), and every other
// field the stored document has deleted.
func replacement(v any, stored map[string]any) []firestore.Update {
	rv := reflect.Indirect(reflect.ValueOf(v))
	rt := rv.Type()
	var out []firestore.Update
	set := map[string]bool{}
	for i := range rt.NumField() {
		f := rt.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("firestore"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		set[name] = true
		fv := rv.Field(i)
		switch {
		case slices.Contains(strings.Split(opts, ","), "serverTimestamp"):
			out = append(out, firestore.Update{Path: name, Value: firestore.ServerTimestamp})
		case slices.Contains(strings.Split(opts, ","), "omitempty") && isEmpty(fv):
			out = append(out, firestore.Update{Path: name, Value: firestore.Delete})
		default:
			out = append(out, firestore.Update{Path: name, Value: fv.Interface()})
		}
	}
	for name := range stored {
		if !set[name] {
			out = append(out, firestore.Update{FieldPath: firestore.FieldPath{name}, Value: firestore.Delete})
		}
	}
	return out
}

// extraFields are the stored fields that a value of v's type does not
// have (v may be a nil pointer of it): a replacement deletes them.
func extraFields(v any, stored map[string]any) []string {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	has := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("firestore"), ",")
		if name == "" {
			name = f.Name
		}
		has[name] = true
	}
	var out []string
	for name := range stored {
		if !has[name] {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// creation returns v as the fields of a new document, as replacement
// writes them.
func creation(v any) map[string]any {
	out := map[string]any{}
	for _, u := range replacement(v, nil) {
		if u.Value != firestore.Delete {
			out[u.Path] = u.Value
		}
	}
	return out
}

// isEmpty is the firestore encoder's test for omitempty.
func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return v.Float() == 0
	case reflect.Interface, reflect.Pointer:
		return v.IsNil()
	}
	if t, ok := v.Interface().(time.Time); ok {
		return t.IsZero()
	}
	return false
}
