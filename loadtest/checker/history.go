// Package main is shoal-checker: it reads a history of client operations (JSON lines, as the
// chaos tests record them) and checks it against the guarantees docs/architecture.md states
// ("What a client can rely on"): single-key registers with Porcupine, and lists with an
// Elle-style append check (lists.go, transactions.go) and Elle's dependency-cycle check
// (cycles.go). It prints every anomaly it finds and exits 1 if there is one.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
)

// Op is one client operation as recorded: invoked at Invoke, answered at Complete (nanoseconds
// on one clock), with its outcome.
//
//   - "set" (Value) and "get" (Read: the value, or nil for a missing key) are register ops;
//   - "append" (Value, pushed to the list Key) and "read" (List: the whole list) are list ops;
//   - "mappend" (Value pushed to every list of Keys in one transaction) and "mread" (Lists: every
//     list of Keys, read in one transaction) are transactions over lists (on one node, or on
//     several: router/tests/transaction_history.rs).
//
// Values and list elements are interned (Elem): a long run's lists are read whole millions of
// times, and as strings they held about 6 GB of memory per GB of history.
//
// Outcome "ok": the op took effect (a write: acknowledged *and* confirmed by WAIT 1, the only
// writes Shoal promises to keep through a failover; or only acknowledged, where the test kills
// no node and runs none with replicas); "fail": it certainly did not (a failed read
// has no effect; the clients record no write as failed today, and an element of a failed append
// in a read is an aborted read, G1a); "unknown": it may or may not have taken effect, and an effect
// may later be lost (a write acknowledged without a WAIT confirmation, a timeout, an error).
type Op struct {
	Process  int
	Kind     string
	Key      string
	Value    Elem
	Read     *Elem
	List     []Elem
	Keys     []string
	Lists    [][]Elem
	Invoke   int64
	Complete int64
	Outcome  string
}

// record is an op as the clients write it (router/tests/support/history.rs), one JSON line: the
// shape ReadHistory parses and Op.String prints.
type record struct {
	Process  int        `json:"process"`
	Kind     string     `json:"op"`
	Key      string     `json:"key"`
	Value    string     `json:"value,omitempty"`
	Read     *string    `json:"read,omitempty"`
	List     []string   `json:"list,omitempty"`
	Keys     []string   `json:"keys,omitempty"`
	Lists    [][]string `json:"lists,omitempty"`
	Invoke   int64      `json:"invoke"`
	Complete int64      `json:"complete"`
	Outcome  string     `json:"outcome"`
}

// Elem is a value or list element of the history, by its index in the table of every one seen
// (two are equal if and only if their strings are); 0 is "", the Value of an op without one.
// Formatted (%q, %s, %v) it is its string.
type Elem int32

// The table, for the whole process: one history is read and checked, in one goroutine.
var (
	elemIDs  = map[string]Elem{"": 0}
	elemStrs = []string{""}
)

// Intern is s's Elem, s added to the table if it is new.
func Intern(s string) Elem {
	if e, ok := elemIDs[s]; ok {
		return e
	}
	if len(elemStrs) > math.MaxInt32 {
		panic("more than 2^31 distinct values in one history")
	}
	e := Elem(len(elemStrs))
	elemIDs[s] = e
	elemStrs = append(elemStrs, s)
	return e
}

// InternAll is a list's Elems, in a slice of its length (a nil list stays nil).
func InternAll(l []string) []Elem {
	if l == nil {
		return nil
	}
	out := make([]Elem, len(l))
	for i, s := range l {
		out[i] = Intern(s)
	}
	return out
}

func (e Elem) String() string { return elemStrs[e] }

func strs(l []Elem) []string {
	if l == nil {
		return nil
	}
	out := make([]string, len(l))
	for i, e := range l {
		out[i] = e.String()
	}
	return out
}

// Never is the completion time of an op whose outcome is unknown: it may take effect at any time
// after its invocation (Porcupine's convention for a crashed client's op).
const Never = math.MaxInt64

// String is the op as recorded, a long list cut to its length and last 8 elements.
func (o Op) String() string {
	r := record{Process: o.Process, Kind: o.Kind, Key: o.Key, Value: o.Value.String(), List: cut(o.List),
		Keys: o.Keys, Invoke: o.Invoke, Complete: o.Complete, Outcome: o.Outcome}
	if o.Read != nil {
		v := o.Read.String()
		r.Read = &v
	}
	if o.Lists != nil {
		r.Lists = make([][]string, len(o.Lists))
		for i, l := range o.Lists {
			r.Lists[i] = cut(l)
		}
	}
	b, _ := json.Marshal(r)
	return string(b)
}

func cut(l []Elem) []string {
	if n := len(l); n > 8 {
		return append([]string{fmt.Sprintf("(%d elements) ...", n)}, strs(l[n-8:])...)
	}
	return strs(l)
}

// End is when the op completed, or Never if its outcome is unknown.
func (o Op) End() int64 {
	if o.Outcome == "unknown" {
		return Never
	}
	return o.Complete
}

// ReadHistory parses JSON lines; a malformed line is an error (a truncated history must not
// pass for a short one). Each line's strings are garbage once it is parsed: its op keeps the
// values and elements as Elems, and its kind, outcome and keys as strings shared by every op.
func ReadHistory(r io.Reader) ([]Op, error) {
	var ops []Op
	names := map[string]string{}
	name := func(s string) string {
		if n, ok := names[s]; ok {
			return n
		}
		names[s] = s
		return s
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var o record
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			return nil, fmt.Errorf("line %d: %v", n, err)
		}
		switch o.Kind {
		case "set", "get", "append", "read", "mappend", "mread":
		default:
			return nil, fmt.Errorf("line %d: unknown op %q", n, o.Kind)
		}
		switch o.Outcome {
		case "ok", "fail", "unknown":
		default:
			return nil, fmt.Errorf("line %d: unknown outcome %q", n, o.Outcome)
		}
		if (o.Kind == "mappend" || o.Kind == "mread") && len(o.Keys) == 0 {
			return nil, fmt.Errorf("line %d: a transaction without keys", n)
		}
		if o.Kind == "mread" && o.Outcome == "ok" && len(o.Lists) != len(o.Keys) {
			return nil, fmt.Errorf("line %d: %d lists read for %d keys", n, len(o.Lists), len(o.Keys))
		}
		if o.Outcome != "unknown" && o.Complete < o.Invoke {
			return nil, fmt.Errorf("line %d: completes before it is invoked", n)
		}
		op := Op{Process: o.Process, Kind: name(o.Kind), Key: name(o.Key), Value: Intern(o.Value),
			List: InternAll(o.List), Invoke: o.Invoke, Complete: o.Complete, Outcome: name(o.Outcome)}
		if o.Read != nil {
			v := Intern(*o.Read)
			op.Read = &v
		}
		if o.Keys != nil {
			op.Keys = make([]string, len(o.Keys))
			for i, k := range o.Keys {
				op.Keys[i] = name(k)
			}
		}
		if o.Lists != nil {
			op.Lists = make([][]Elem, len(o.Lists))
			for i, l := range o.Lists {
				op.Lists[i] = InternAll(l)
			}
		}
		ops = append(ops, op)
	}
	return ops, sc.Err()
}

// byKey groups the ops of the given kinds per key, each group in invocation order, keys sorted.
func byKey(ops []Op, kinds ...string) ([]string, map[string][]Op) {
	groups := map[string][]Op{}
	for _, o := range ops {
		for _, k := range kinds {
			if o.Kind == k {
				groups[o.Key] = append(groups[o.Key], o)
			}
		}
	}
	keys := make([]string, 0, len(groups))
	for k, g := range groups {
		keys = append(keys, k)
		sort.SliceStable(g, func(i, j int) bool { return g[i].Invoke < g[j].Invoke })
	}
	sort.Strings(keys)
	return keys, groups
}

// Anomaly is one violated guarantee, with the ops that show it.
type Anomaly struct {
	Kind string
	Key  string
	Text string
	Ops  []Op
}

func (a Anomaly) String() string {
	s := fmt.Sprintf("%s on %q: %s", a.Kind, a.Key, a.Text)
	for _, o := range a.Ops {
		s += "\n    " + o.String()
	}
	return s
}
