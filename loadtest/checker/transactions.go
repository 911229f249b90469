package main

import "fmt"

// expandTransactions checks what only transactions can show, and returns the history with each
// transaction also as one op per key (an "append" or a "read" with the transaction's times and
// outcome), so the per-list checks cover transactional lists too: lost, duplicated, reordered
// elements.
//
// Every transaction of a group appends one value to every list of its Keys, and nothing else
// writes those lists, so a transaction that reads them all must find them equal: a difference is
// a read of part of a transaction (Elle's intermediate read; with unconfirmed transactions
// possibly lost, a transaction lost on one list and kept on another shows the same way). The
// dependency-cycle check (cycles.go) takes each transaction as one op instead: part of a
// confirmed transaction seen is a G-single cycle there.
func expandTransactions(ops []Op) ([]Op, []Anomaly) {
	var out []Op
	var anomalies []Anomaly
	for _, o := range ops {
		switch o.Kind {
		case "mappend":
			for _, k := range o.Keys {
				e := o
				e.Kind, e.Key, e.Keys = "append", k, nil
				out = append(out, e)
			}
		case "mread":
			for i, k := range o.Keys {
				e := o
				e.Kind, e.Key, e.Keys, e.Lists = "read", k, nil, nil
				if o.Outcome == "ok" {
					e.List = o.Lists[i]
				}
				out = append(out, e)
			}
			if o.Outcome == "ok" {
				if a := partRead(o); a != nil {
					anomalies = append(anomalies, *a)
				}
			}
		default:
			out = append(out, o)
		}
	}
	return out, anomalies
}

// partRead: the lists one transaction read differ (first difference reported).
func partRead(o Op) *Anomaly {
	first := o.Lists[0]
	for i, l := range o.Lists[1:] {
		n := len(first)
		if len(l) > n {
			n = len(l)
		}
		for j := 0; j < n; j++ {
			var a, b Elem // "" past the end of the shorter list
			if j < len(first) {
				a = first[j]
			}
			if j < len(l) {
				b = l[j]
			}
			if a != b {
				return &Anomaly{"intermediate read", fmt.Sprint(o.Keys), fmt.Sprintf(
					"one transaction read %q and %q at position %d of %s and %s", a, b, j, o.Keys[0], o.Keys[i+1]), []Op{o}}
			}
		}
	}
	return nil
}
