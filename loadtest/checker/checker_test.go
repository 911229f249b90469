package main

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"
)

func s(v string) *string { return &v }

// elem is v interned, or nil.
func elem(v *string) *Elem {
	if v == nil {
		return nil
	}
	e := Intern(*v)
	return &e
}

// Shorthands for hand-made histories: times are small integers.
func set(p int, v string, from, to int64, outcome string) Op {
	return Op{Process: p, Kind: "set", Key: "k", Value: Intern(v), Invoke: from, Complete: to, Outcome: outcome}
}

func get(p int, v *string, from, to int64) Op {
	return Op{Process: p, Kind: "get", Key: "k", Read: elem(v), Invoke: from, Complete: to, Outcome: "ok"}
}

func push(p int, v string, from, to int64, outcome string) Op {
	return Op{Process: p, Kind: "append", Key: "l", Value: Intern(v), Invoke: from, Complete: to, Outcome: outcome}
}

func read(p int, list []string, from, to int64) Op {
	return Op{Process: p, Kind: "read", Key: "l", List: InternAll(list), Invoke: from, Complete: to, Outcome: "ok"}
}

func txn(p int, v string, from, to int64, outcome string) Op {
	return Op{Process: p, Kind: "mappend", Keys: []string{"x", "y"}, Value: Intern(v), Invoke: from, Complete: to, Outcome: outcome}
}

func txnRead(p int, x, y []string, from, to int64) Op {
	return Op{Process: p, Kind: "mread", Keys: []string{"x", "y"}, Lists: [][]Elem{InternAll(x), InternAll(y)}, Invoke: from, Complete: to, Outcome: "ok"}
}

func kinds(r Result) string {
	var k []string
	for _, a := range r.Anomalies {
		k = append(k, a.Kind)
	}
	return strings.Join(k, ",")
}

func TestHistoriesThatMustFail(t *testing.T) {
	cases := []struct {
		name string
		ops  []Op
		want string
	}{
		{"a confirmed write lost: the final read shows the one before", []Op{
			set(0, "a", 0, 10, "ok"), set(0, "b", 20, 30, "ok"), get(1, s("a"), 40, 50),
		}, "not linearizable"},
		{"a confirmed write lost: the key is gone", []Op{
			set(0, "a", 0, 10, "ok"), get(1, nil, 40, 50),
		}, "not linearizable"},
		{"a stale read after a completed write", []Op{
			set(0, "a", 0, 10, "ok"), get(1, s("a"), 11, 12), set(0, "b", 20, 30, "ok"),
			get(1, s("b"), 31, 32), get(2, s("a"), 33, 34),
		}, "not linearizable"},
		{"a read of a value never written", []Op{
			set(0, "a", 0, 10, "ok"), get(1, s("z"), 20, 30),
		}, "phantom read"},
		{"a duplicated append", []Op{
			push(0, "1", 0, 10, "ok"), push(0, "2", 20, 30, "unknown"), read(1, []string{"1", "2", "2"}, 40, 50),
		}, "duplicated append"},
		{"a lost append", []Op{
			push(0, "1", 0, 10, "ok"), push(0, "2", 20, 30, "ok"), read(1, []string{"1"}, 40, 50),
		}, "lost append"},
		{"reads that diverge", []Op{
			push(0, "1", 0, 10, "ok"), push(1, "2", 0, 10, "ok"),
			read(2, []string{"1", "2"}, 20, 30), read(3, []string{"2", "1"}, 20, 30),
		}, "divergent reads"},
		{"a stale list read", []Op{
			push(0, "1", 0, 100, "ok"), read(1, []string{"1"}, 10, 20), read(2, []string{}, 30, 40),
		}, "stale read"},
		{"appends read out of real-time order", []Op{
			push(0, "1", 0, 10, "ok"), push(0, "2", 20, 30, "ok"), read(1, []string{"2", "1"}, 40, 50),
		}, "order"},
		{"a transaction read in part", []Op{
			txn(0, "1", 0, 10, "ok"), txn(0, "2", 20, 30, "unknown"), txnRead(1, []string{"1", "2"}, []string{"1"}, 40, 50),
		}, "intermediate read"},
		{"a confirmed transaction lost on one of its lists", []Op{
			txn(0, "1", 0, 10, "ok"), txnRead(1, []string{"1"}, []string{"1"}, 20, 30), txnRead(1, []string{"1"}, []string{}, 40, 50),
		}, "lost append"},
		{"an element read before its append began", []Op{
			read(1, []string{"1"}, 0, 10), push(0, "1", 20, 30, "unknown"),
		}, "phantom read"},
	}
	for _, c := range cases {
		r := Check(c.ops, 5*time.Second, 1000)
		if !strings.Contains(kinds(r), c.want) {
			t.Errorf("%s: want %q, got %q (%s)", c.name, c.want, kinds(r), r.Summary)
		}
	}
}

func TestHistoriesThatMustPass(t *testing.T) {
	cases := []struct {
		name string
		ops  []Op
	}{
		{"concurrent writes, reads in an order that fits", []Op{
			set(0, "a", 0, 100, "ok"), set(1, "b", 10, 90, "ok"), get(2, s("b"), 20, 30),
			get(2, s("a"), 40, 50), get(3, s("a"), 110, 120),
		}},
		{"an unknown write that took effect late", []Op{
			set(0, "a", 0, 10, "ok"), set(1, "b", 20, 0, "unknown"), get(2, s("a"), 30, 40), get(2, s("b"), 50, 60),
		}},
		{"an unconfirmed write seen and then lost at a failover", []Op{
			set(0, "a", 0, 10, "ok"), set(0, "b", 20, 30, "unknown"), get(1, s("b"), 31, 32), get(1, s("a"), 40, 50),
		}},
		{"a failed read is no evidence", []Op{
			set(0, "a", 0, 10, "ok"), {Kind: "get", Key: "k", Invoke: 20, Complete: 30, Outcome: "fail"},
		}},
		{"lists: concurrent appends, prefix reads", []Op{
			push(0, "1", 0, 10, "ok"), push(1, "2", 5, 30, "ok"), read(2, []string{"1"}, 12, 14),
			read(2, []string{"1", "2"}, 40, 50), push(0, "3", 60, 0, "unknown"), read(3, []string{"1", "2"}, 70, 80),
		}},
		{"transactions: whole reads, an unconfirmed one lost whole", []Op{
			txn(0, "1", 0, 10, "ok"), txn(1, "2", 5, 25, "unknown"), txnRead(2, []string{"1", "2"}, []string{"1", "2"}, 30, 40),
			txn(0, "3", 50, 60, "ok"), txnRead(2, []string{"1", "3"}, []string{"1", "3"}, 70, 80),
		}},
		{"lists: an unconfirmed append seen, then lost", []Op{
			push(0, "1", 0, 10, "ok"), push(0, "2", 20, 30, "unknown"), read(1, []string{"1", "2"}, 40, 50),
			push(0, "3", 60, 70, "ok"), read(1, []string{"1", "3"}, 80, 90),
		}},
	}
	for _, c := range cases {
		if r := Check(c.ops, 5*time.Second, 1000); len(r.Anomalies) > 0 || len(r.Undecided) > 0 {
			t.Errorf("%s: %s %v", c.name, r.Summary, r.Anomalies)
		}
	}
}

func TestReadHistoryRefusesATruncatedLine(t *testing.T) {
	_, err := ReadHistory(strings.NewReader(`{"op":"set","key":"k","value":"a","invoke":1,"complete":2,"outcome":"ok"}` + "\n" + `{"op":"get","ke`))
	if err == nil {
		t.Fatal("a truncated line was accepted")
	}
}

// Values and elements are interned as they are read: one Elem per string, whichever op and key
// hold it; ops and anomalies are printed with the strings recorded.
func TestReadHistoryInternsElements(t *testing.T) {
	history := strings.Join([]string{
		`{"complete":2,"invoke":1,"key":"l","op":"append","outcome":"ok","process":4,"value":"4-1"}`,
		`{"complete":4,"invoke":3,"key":"l","op":"append","outcome":"unknown","process":4,"value":"q\"\u00e9"}`,
		`{"complete":6,"invoke":5,"key":"l","list":["4-1","q\"é","4-1"],"op":"read","outcome":"ok","process":5}`,
		`{"complete":8,"invoke":7,"key":"x,y","keys":["x","y"],"op":"mappend","outcome":"ok","process":6,"value":"6-1"}`,
		`{"complete":10,"invoke":9,"key":"x,y","keys":["x","y"],"lists":[["6-1"],["6-1","4-1"]],"op":"mread","outcome":"ok","process":7}`,
		`{"complete":12,"invoke":11,"key":"k","op":"set","outcome":"ok","process":0,"value":"4-1"}`,
		`{"complete":14,"invoke":13,"key":"k","op":"get","outcome":"ok","process":1,"read":"4-1"}`,
		`{"complete":16,"invoke":15,"key":"k","op":"get","outcome":"ok","process":1,"read":null}`,
	}, "\n")
	ops, err := ReadHistory(strings.NewReader(history))
	if err != nil {
		t.Fatal(err)
	}
	one, q, r, tx, tr, set, get, missing := ops[0].Value, ops[1].Value, ops[2], ops[3].Value, ops[4], ops[5], ops[6], ops[7]
	if one == q || one == tx || q == tx || one == 0 {
		t.Errorf("distinct values share an Elem: %d %d %d", one, q, tx)
	}
	if fmt.Sprint(r.List) != fmt.Sprint([]Elem{one, q, one}) || fmt.Sprint(tr.Lists) != fmt.Sprint([][]Elem{{tx}, {tx, one}}) {
		t.Errorf("reads hold other Elems than the appends: %d %d %d, read %d, transaction read %d", one, q, tx, r.List, tr.Lists)
	}
	if set.Value != one || *get.Read != one || missing.Read != nil {
		t.Errorf("register values: set %d, read %v, missing read %v, want %d", set.Value, get.Read, missing.Read, one)
	}
	if one.String() != "4-1" || q.String() != `q"é` || Intern(`q"é`) != q {
		t.Errorf("Elems and strings: %d is %q, %d is %q", one, one, q, q)
	}
	for i, want := range []string{
		`{"process":4,"op":"append","key":"l","value":"4-1","invoke":1,"complete":2,"outcome":"ok"}`,
		`{"process":5,"op":"read","key":"l","list":["4-1","q\"é","4-1"],"invoke":5,"complete":6,"outcome":"ok"}`,
		`{"process":7,"op":"mread","key":"x,y","keys":["x","y"],"lists":[["6-1"],["6-1","4-1"]],"invoke":9,"complete":10,"outcome":"ok"}`,
		`{"process":1,"op":"get","key":"k","read":"4-1","invoke":13,"complete":14,"outcome":"ok"}`,
		`{"process":1,"op":"get","key":"k","invoke":15,"complete":16,"outcome":"ok"}`,
	} {
		if got := ops[[]int{0, 2, 4, 6, 7}[i]].String(); got != want {
			t.Errorf("printed as %s, recorded as %s", got, want)
		}
	}
	long := read(1, strings.Fields("e0 e1 e2 e3 e4 e5 e6 e7 e8 e9"), 1, 2)
	if got, want := long.String(), `{"process":1,"op":"read","key":"l","list":["(10 elements) ...","e2","e3","e4","e5","e6","e7","e8","e9"],"invoke":1,"complete":2,"outcome":"ok"}`; got != want {
		t.Errorf("a long list printed as %s, want %s", got, want)
	}
	var texts []string
	for _, a := range Check(ops, 5*time.Second, 1000).Anomalies {
		texts = append(texts, a.String())
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{
		`duplicated append on "l": "4-1" is in the list twice`,
		`"list":["4-1","q\"é","4-1"]`,
		`one transaction read "" and "4-1" at position 1 of x and y`,
		`phantom read on "y": "4-1" was never appended`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no %s in the anomalies:\n%s", want, all)
		}
	}
}

// Reading a history keeps an element read in 4 bytes (its Elem), however long its string and
// however often it is read: a long list read many times.
func TestReadHistoryMemoryPerElement(t *testing.T) {
	const n, reads = 2000, 500
	list := make([]string, n)
	for i := range list {
		list[i] = fmt.Sprintf("memory-test-%d", i)
	}
	l, _ := json.Marshal(list)
	var b strings.Builder
	for i := 0; i < reads; i++ {
		fmt.Fprintf(&b, `{"complete":%d,"invoke":%d,"key":"m","list":%s,"op":"read","outcome":"ok","process":1}`+"\n", 2*i+1, 2*i, l)
	}
	history := b.String()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ops, err := ReadHistory(strings.NewReader(history))
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perElement := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / (n * reads)
	runtime.KeepAlive(ops)
	runtime.KeepAlive(history)
	t.Logf("%.2f heap bytes per element read (%d reads of %d)", perElement, reads, n)
	if perElement > 8 {
		t.Errorf("%.2f heap bytes per element read, want at most 8", perElement)
	}
}

func TestALongKeyIsUndecidedNotPassed(t *testing.T) {
	ops := []Op{set(0, "a", 0, 10, "ok"), get(1, s("a"), 20, 30), get(1, s("a"), 40, 50)}
	if r := Check(ops, time.Second, 2); len(r.Undecided) != 1 {
		t.Fatalf("a key over the bound was not left undecided: %s", r.Summary)
	}
}

// Shorthands for the cycle check's histories: single appends and reads of any list.
func pushTo(p int, key, v string, from, to int64, outcome string) Op {
	return Op{Process: p, Kind: "append", Key: key, Value: Intern(v), Invoke: from, Complete: to, Outcome: outcome}
}

func readOf(p int, key string, list []string, from, to int64) Op {
	return Op{Process: p, Kind: "read", Key: key, List: InternAll(list), Invoke: from, Complete: to, Outcome: "ok"}
}

// Each history holds one dependency cycle (or aborted read); the anomaly named must be found
// (by checkCycles: the other checks name theirs otherwise, so each case fails without it).
func TestDependencyCycles(t *testing.T) {
	cases := []struct {
		name string
		ops  []Op
		want string
	}{
		{"G0: two transactions append to x in one order and to y in the other", []Op{
			txn(0, "1", 0, 100, "ok"), txn(1, "2", 0, 100, "ok"),
			readOf(2, "x", []string{"1", "2"}, 110, 120), readOf(3, "y", []string{"2", "1"}, 110, 120),
		}, "G0"},
		{"G1c-realtime: a read holds an append invoked after the read completed", []Op{
			push(0, "1", 30, 40, "ok"), push(1, "2", 0, 50, "ok"), read(2, []string{"1", "2"}, 10, 20),
		}, "G1c-realtime"},
		{"G-single: a transaction read sees a confirmed transaction on x and not on y", []Op{
			txn(0, "1", 0, 30, "ok"), txnRead(1, []string{"1"}, []string{}, 10, 20),
			txnRead(1, []string{"1"}, []string{"1"}, 40, 50),
		}, "G-single"},
		{"G2: two reads each see one of two concurrent appends and not the other (long fork)", []Op{
			pushTo(0, "x", "a", 0, 100, "ok"), pushTo(1, "y", "b", 0, 100, "ok"),
			txnRead(2, []string{}, []string{"b"}, 10, 90), txnRead(3, []string{"a"}, []string{}, 10, 90),
		}, "G2"},
		{"G-single-realtime: a read misses a confirmed append, seen by a read that completed before it began", []Op{
			push(0, "1", 0, 10, "ok"), read(1, []string{"1"}, 15, 20), read(2, []string{}, 25, 30),
		}, "G-single-realtime"},
		{"G1a: a read holds an append that failed", []Op{
			push(0, "1", 0, 10, "ok"), push(0, "2", 20, 30, "fail"), read(1, []string{"1", "2"}, 40, 50),
		}, "G1a"},
		{"G1a: a transaction read holds a transaction that failed", []Op{
			txn(0, "1", 0, 10, "fail"), txnRead(1, []string{"1"}, []string{"1"}, 20, 30),
		}, "G1a"},
	}
	for _, c := range cases {
		r := Check(c.ops, 5*time.Second, 1000)
		found := false
		for _, a := range r.Anomalies {
			found = found || a.Kind == c.want
		}
		if !found {
			t.Errorf("%s: want %q, got %q (%s)", c.name, c.want, kinds(r), r.Summary)
		}
	}
	// The cycle is reported with its ops and edges: T1 and T2 of the G0 case, each way round.
	r := Check(cases[0].ops, 5*time.Second, 1000)
	for _, a := range r.Anomalies {
		if a.Kind == "G0" && (len(a.Ops) != 2 || !strings.Contains(a.Text, "T1 -ww-> T2") || !strings.Contains(a.Text, "T2 -ww-> T1")) {
			t.Errorf("G0 reported as %v", a)
		}
	}
}

// A clean history with every kind of list op: concurrent appends, transactions, unconfirmed
// appends seen and then lost, failed reads: no anomaly.
func TestASerializableListHistoryPasses(t *testing.T) {
	ops := []Op{
		txn(0, "1", 0, 10, "ok"), txn(1, "2", 5, 40, "ok"), txnRead(2, []string{"1"}, []string{"1"}, 6, 12),
		txn(0, "3", 20, 30, "unknown"), txnRead(3, []string{"1", "3"}, []string{"1", "3"}, 25, 35),
		txnRead(2, []string{"1", "3", "2"}, []string{"1", "3", "2"}, 41, 50),
		txnRead(3, []string{"1", "2"}, []string{"1", "2"}, 60, 70), // "3" lost at a failover
		push(4, "a", 0, 10, "ok"), push(5, "b", 5, 15, "unknown"), read(6, []string{"a", "b"}, 12, 20),
		push(4, "c", 21, 30, "ok"), read(6, []string{"a", "c"}, 31, 40),
		{Process: 6, Kind: "read", Key: "l", Invoke: 41, Complete: 45, Outcome: "fail"},
	}
	if r := Check(ops, 5*time.Second, 1000); len(r.Anomalies) > 0 {
		t.Errorf("%s %v", r.Summary, r.Anomalies)
	}
}

// Random strictly serializable histories (each op takes effect at one instant within its call;
// unconfirmed appends sometimes never apply, sometimes are lost later at a "failover", which
// drops the list's unconfirmed tail) pass every check, the cycle check included.
func TestRandomSerializableHistoriesPass(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		ops := randomHistory(seed, 600)
		if r := Check(ops, 5*time.Second, 1000); len(r.Anomalies) > 0 {
			t.Fatalf("seed %d: %s %v", seed, r.Summary, r.Anomalies[0])
		}
	}
}

func randomHistory(seed int64, n int) []Op {
	rng := rand.New(rand.NewSource(seed))
	type planned struct {
		op Op
		at int64
		// An unconfirmed append that applies (else it never does).
		applies bool
	}
	var plan []planned
	clock := make([]int64, 4)
	for i := 0; i < n; i++ {
		p := rng.Intn(len(clock))
		o := Op{Process: p, Invoke: clock[p] + 1 + rng.Int63n(5)}
		at := o.Invoke + rng.Int63n(10)
		o.Complete = at + 1 + rng.Int63n(10)
		clock[p] = o.Complete
		value := Intern(fmt.Sprintf("%d-%d", p, i))
		switch rng.Intn(4) {
		case 0:
			o.Kind, o.Key, o.Value = "append", "l", value
		case 1:
			o.Kind, o.Key = "read", "l"
		case 2:
			o.Kind, o.Keys, o.Value = "mappend", []string{"x", "y"}, value
		default:
			o.Kind, o.Keys = "mread", []string{"x", "y"}
		}
		o.Outcome = "ok"
		applies := true
		if (o.Kind == "append" || o.Kind == "mappend") && rng.Intn(3) == 0 {
			o.Outcome, applies = "unknown", rng.Intn(2) == 0
		}
		if (o.Kind == "read" || o.Kind == "mread") && rng.Intn(10) == 0 {
			o.Outcome = "fail"
		}
		plan = append(plan, planned{o, at, applies})
	}
	sort.SliceStable(plan, func(a, b int) bool { return plan[a].at < plan[b].at })
	state := map[string][]Elem{}
	confirmed := map[Elem]bool{}
	var ops []Op
	for _, pl := range plan {
		o := pl.op
		if rng.Intn(40) == 0 { // a failover: part of each list's unconfirmed tail is lost
			drop := rng.Intn(3)
			for d := 0; d < drop; d++ {
				l, x := state["l"], state["x"]
				if len(l) > 0 && !confirmed[l[len(l)-1]] {
					state["l"] = l[:len(l)-1]
				}
				if len(x) > 0 && !confirmed[x[len(x)-1]] {
					state["x"], state["y"] = x[:len(x)-1], state["y"][:len(x)-1]
				}
			}
		}
		switch o.Kind {
		case "append", "mappend":
			if pl.applies {
				confirmed[o.Value] = o.Outcome == "ok"
				for _, k := range opKeys(&o) {
					state[k] = append(append([]Elem(nil), state[k]...), o.Value)
				}
			}
		case "read":
			if o.Outcome == "ok" {
				o.List = append([]Elem{}, state["l"]...)
			}
		case "mread":
			if o.Outcome == "ok" {
				o.Lists = [][]Elem{append([]Elem{}, state["x"]...), append([]Elem{}, state["y"]...)}
			}
		}
		ops = append(ops, o)
	}
	return ops
}
