package main

import (
	"fmt"
	"sort"
)

// checkLists checks each list key's append/read history, Elle's list-append checks for a single
// key (with real time, a single key's dependency cycles come down to one of these; checkCycles,
// cycles.go, finds the cycles themselves, across the lists of a transaction too):
//
//   - duplicated append: a read holds an element twice (every appended value is unique);
//   - phantom read: a read holds an element no append wrote, or one whose append was invoked
//     only after the read completed;
//   - divergent reads: the confirmed elements of two reads (in the order read) are not one a
//     prefix of the other: some reader saw confirmed appends in another order, or one in the
//     middle missing;
//   - lost append: a read invoked after a confirmed append completed does not hold it (this is
//     how a lost write shows in the final read);
//   - stale read: a read invoked after another completed holds fewer confirmed elements;
//   - order: a confirmed append that completed before another was invoked is read after it.
//
// Unconfirmed appends may be lost at a failover (Shoal keeps only writes WAIT confirmed), so
// they may be missing from reads, or appear in one read and not in a later one; they are checked
// for duplicates and phantoms only.
func checkLists(ops []Op) []Anomaly {
	var anomalies []Anomaly
	keys, groups := byKey(ops, "append", "read")
	for _, key := range keys {
		anomalies = append(anomalies, checkList(key, groups[key])...)
	}
	return anomalies
}

func checkList(key string, g []Op) []Anomaly {
	var out []Anomaly
	appends := map[Elem]Op{}
	var confirmed []Op
	var reads []Op
	for _, o := range g {
		switch {
		case o.Kind == "append":
			appends[o.Value] = o
			if o.Outcome == "ok" {
				confirmed = append(confirmed, o)
			}
		case o.Outcome == "ok":
			reads = append(reads, o)
		}
	}
	// The confirmed elements of each read, in the order read.
	proj := make([][]Elem, len(reads))
	for i, r := range reads {
		seen := map[Elem]bool{}
		for _, v := range r.List {
			a, ok := appends[v]
			switch {
			case seen[v]:
				out = append(out, Anomaly{"duplicated append", key, fmt.Sprintf("%q is in the list twice", v), []Op{a, r}})
			case !ok:
				out = append(out, Anomaly{"phantom read", key, fmt.Sprintf("%q was never appended", v), []Op{r}})
			case a.Invoke > r.Complete:
				out = append(out, Anomaly{"phantom read", key, fmt.Sprintf("%q was read before its append began", v), []Op{a, r}})
			case a.Outcome == "ok":
				proj[i] = append(proj[i], v)
			}
			seen[v] = true
		}
	}
	out = append(out, prefixes(key, reads, proj)...)
	out = append(out, realTime(key, reads, proj, confirmed, appends)...)
	return out
}

// prefixes: every two reads' confirmed elements are one a prefix of the other. Checking each
// read against the longest is enough: two prefixes of one list are prefixes of each other.
func prefixes(key string, reads []Op, proj [][]Elem) []Anomaly {
	longest := 0
	for i := range proj {
		if len(proj[i]) > len(proj[longest]) {
			longest = i
		}
	}
	var out []Anomaly
	for i := range proj {
		for j, v := range proj[i] {
			if proj[longest][j] != v {
				out = append(out, Anomaly{"divergent reads", key,
					fmt.Sprintf("confirmed element %d is %q in one read and %q in another", j, v, proj[longest][j]),
					[]Op{reads[i], reads[longest]}})
				break
			}
		}
	}
	return out
}

// realTime: reads see every confirmed append that completed before they began, see no fewer
// confirmed elements than reads that completed before they began, and confirmed appends are
// read in their real-time order. Linear in the size of each read (a chaos run's lists hold
// thousands of elements, read thousands of times).
func realTime(key string, reads []Op, proj [][]Elem, confirmed []Op, appends map[Elem]Op) []Anomaly {
	var out []Anomaly
	// Reads by completion time, and the most confirmed elements any read completed by then held.
	done := make([]int, len(reads))
	for i := range done {
		done[i] = i
	}
	sort.Slice(done, func(a, b int) bool { return reads[done[a]].Complete < reads[done[b]].Complete })
	most := make([]int, len(done))
	for k, d := range done {
		most[k] = d
		if k > 0 && len(proj[most[k-1]]) >= len(proj[d]) {
			most[k] = most[k-1]
		}
	}
	reported := map[Elem]bool{}
	for i, r := range reads {
		in := make(map[Elem]bool, len(proj[i]))
		for _, v := range proj[i] {
			in[v] = true
		}
		for _, a := range confirmed {
			if !in[a.Value] && a.Complete < r.Invoke && !reported[a.Value] {
				// Once per element (the first read that misses it): a lost element is missing
				// from every later read, and a thousand copies would hide other anomalies.
				reported[a.Value] = true
				out = append(out, Anomaly{"lost append", key,
					fmt.Sprintf("%q was confirmed before this read began and is not in it (nor, maybe, in later ones)", a.Value),
					[]Op{a, r}})
			}
		}
		// An element placed after one whose append began after it had completed: the latest
		// invocation among the elements before it is all that needs comparing.
		latest := -1
		for j, v := range proj[i] {
			a := appends[v]
			if latest >= 0 && a.Complete < appends[proj[i][latest]].Invoke {
				b := appends[proj[i][latest]]
				out = append(out, Anomaly{"order", key,
					fmt.Sprintf("%q completed before %q began but is read after it", a.Value, b.Value), []Op{a, b, r}})
				break
			}
			if latest < 0 || a.Invoke > appends[proj[i][latest]].Invoke {
				latest = j
			}
		}
		// Among the reads that completed before this one began, the one that held the most.
		n := sort.Search(len(done), func(k int) bool { return reads[done[k]].Complete >= r.Invoke })
		if n > 0 && len(proj[most[n-1]]) > len(proj[i]) {
			k := most[n-1]
			out = append(out, Anomaly{"stale read", key,
				fmt.Sprintf("holds %d confirmed elements, a read that completed before it began held %d",
					len(proj[i]), len(proj[k])), []Op{reads[k], r}})
		}
	}
	return out
}
