package main

import (
	"strings"
	"testing"
	"time"
)

func s(v string) *string { return &v }

// Shorthands for hand-made histories: times are small integers.
func set(p int, v string, from, to int64, outcome string) Op {
	return Op{Process: p, Kind: "set", Key: "k", Value: v, Invoke: from, Complete: to, Outcome: outcome}
}

func get(p int, v *string, from, to int64) Op {
	return Op{Process: p, Kind: "get", Key: "k", Read: v, Invoke: from, Complete: to, Outcome: "ok"}
}

func push(p int, v string, from, to int64, outcome string) Op {
	return Op{Process: p, Kind: "append", Key: "l", Value: v, Invoke: from, Complete: to, Outcome: outcome}
}

func read(p int, list []string, from, to int64) Op {
	return Op{Process: p, Kind: "read", Key: "l", List: list, Invoke: from, Complete: to, Outcome: "ok"}
}

func txn(p int, v string, from, to int64, outcome string) Op {
	return Op{Process: p, Kind: "mappend", Keys: []string{"x", "y"}, Value: v, Invoke: from, Complete: to, Outcome: outcome}
}

func txnRead(p int, x, y []string, from, to int64) Op {
	return Op{Process: p, Kind: "mread", Keys: []string{"x", "y"}, Lists: [][]string{x, y}, Invoke: from, Complete: to, Outcome: "ok"}
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

func TestALongKeyIsUndecidedNotPassed(t *testing.T) {
	ops := []Op{set(0, "a", 0, 10, "ok"), get(1, s("a"), 20, 30), get(1, s("a"), 40, 50)}
	if r := Check(ops, time.Second, 2); len(r.Undecided) != 1 {
		t.Fatalf("a key over the bound was not left undecided: %s", r.Summary)
	}
}
