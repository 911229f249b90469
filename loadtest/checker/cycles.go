package main

import (
	"fmt"
	"sort"
	"strings"
)

// checkCycles is Elle's dependency-cycle check for list-append histories (append/read and the
// transactions mappend/mread), over the original ops (a transaction is one node, whatever the
// number of its keys).
//
// What the history can prove: a value is appended once, so each element read names the op that
// wrote it. A list's version order is the order of its confirmed elements in the read that holds
// the most of them (checkLists reports reads whose confirmed elements are not a prefix of it;
// their dependencies are left out here). The nodes are the ops that certainly took effect: the
// confirmed appends (outcome "ok") and the reads that answered. Between them, per list:
//
//   - ww: T2 appended the confirmed element right after T1's;
//   - wr: T2 read the list up to T1's element (the last confirmed element it holds);
//   - rw: T1 read the list up to the element before T2's (T2's confirmed append came after
//     the state T1 saw: an anti-dependency);
//   - rt: T1 completed before T2 was invoked (real time). Each op touches one group of lists
//     (one list, or the lists a transaction writes, on one node or several), and
//     linearizability is local: real-time edges within a group are enough for the whole
//     history to be strictly serializable, so they are only drawn within a group. Each group
//     of one key generation (lists get new keys every 20 s) is a graph of its own: a few
//     thousand ops, checked and dropped in turn.
//
// Any cycle is an anomaly, one per strongly connected component (Tarjan), named as Elle names
// the shortest cycle it finds there: G0 (ww edges only), G1c (ww and wr), G-single (exactly one
// rw), G2 (more than one rw), with "-realtime" when the cycle needs a real-time edge (Elle's
// strict-serializable variants). Reads and appends are separate ops here (no op both reads and
// writes), so a cycle through a read always leaves it by an rw or rt edge: plain G1c cannot
// occur, G1c-realtime can. A transaction read that holds one of a confirmed transaction's
// elements on one list and not on the other shows as G-single (read skew, part of a
// transaction seen) once the other list is read with it.
//
// Unconfirmed appends ("unknown") are not nodes, and their elements are skipped in reads (read
// "through"): Shoal may lose them at a failover, after a client read them, which Elle would call
// an aborted read but Shoal allows (docs/architecture.md, "What a client can rely on"); the
// register check leaves reads of unconfirmed values out in the same way. So a cycle that only
// closes through an unconfirmed write is not found. What is checked is that the confirmed
// appends and every read, each read cut to its confirmed elements, are strictly serializable.
//
// G1a (aborted read): an element whose append is known to have failed (outcome "fail": it
// certainly did not apply) is in a read. G1b (intermediate read: a state between two appends of
// one transaction to one list) needs a transaction that appends to a list twice, which the
// clients never do, so it is not checked; reading part of a transaction across its lists is
// (expandTransactions, and G-single above).
func checkCycles(ops []Op) []Anomaly {
	var out []Anomaly
	for _, comp := range listComponents(ops) {
		out = append(out, checkComponent(ops, comp)...)
	}
	return out
}

func opKeys(o *Op) []string {
	if o.Kind == "mappend" || o.Kind == "mread" {
		return o.Keys
	}
	return []string{o.Key}
}

func isListWrite(o *Op) bool { return o.Kind == "append" || o.Kind == "mappend" }

// listComponents groups the list ops by the lists they touch, keys joined when one op touches
// several (union-find): the indices of each group's ops, groups in the order of their first op.
func listComponents(ops []Op) [][]int {
	parent := map[string]string{}
	var find func(string) string
	find = func(k string) string {
		p, ok := parent[k]
		if !ok {
			parent[k] = k
			return k
		}
		if p == k {
			return k
		}
		r := find(p)
		parent[k] = r
		return r
	}
	for i := range ops {
		o := &ops[i]
		if !isListOp(o) {
			continue
		}
		ks := opKeys(o)
		r := find(ks[0])
		for _, k := range ks[1:] {
			if r2 := find(k); r2 != r {
				parent[r2] = r
			}
		}
	}
	index := map[string]int{}
	var comps [][]int
	for i := range ops {
		o := &ops[i]
		if !isListOp(o) {
			continue
		}
		r := find(opKeys(o)[0])
		c, ok := index[r]
		if !ok {
			c = len(comps)
			index[r] = c
			comps = append(comps, nil)
		}
		comps[c] = append(comps[c], i)
	}
	return comps
}

// Edge kinds, as bits (a set of them selects which edges a cycle may use).
const (
	ww uint8 = 1 << iota
	wr
	rw
	rt
)

type edge struct {
	to   int
	kind uint8
	key  string
	// ww: the later element (and prev the earlier); wr: the last element read; rw: the element
	// the read did not hold.
	elem, prev Elem
}

type depGraph struct {
	ops   []Op
	nodes []int // node -> index in ops
	adj   [][]edge
}

// readList is what op o read of its i-th key.
func readList(o *Op, i int) []Elem {
	if o.Kind == "mread" {
		return o.Lists[i]
	}
	return o.List
}

// listElem is an element of one list.
type listElem struct {
	key  string
	elem Elem
}

func checkComponent(ops []Op, comp []int) []Anomaly {
	var out []Anomaly
	// Who appended each value to each list (any outcome).
	writer := map[string]map[Elem]int{}
	for _, i := range comp {
		o := &ops[i]
		if !isListWrite(o) {
			continue
		}
		for _, k := range opKeys(o) {
			if writer[k] == nil {
				writer[k] = map[Elem]int{}
			}
			writer[k][o.Value] = i
		}
	}
	confirmed := func(k string, v Elem) bool {
		w, ok := writer[k][v]
		return ok && ops[w].Outcome == "ok"
	}
	// G1a, and each list's version order: its confirmed elements in the read holding the most.
	aborted := map[listElem]bool{}
	best := map[string][]Elem{}
	bestN := map[string]int{}
	for _, i := range comp {
		o := &ops[i]
		if isListWrite(o) || o.Outcome != "ok" {
			continue
		}
		for ki, k := range opKeys(o) {
			n := 0
			for _, v := range readList(o, ki) {
				w, ok := writer[k][v]
				switch {
				case !ok:
				case ops[w].Outcome == "ok":
					n++
				case ops[w].Outcome == "fail" && !aborted[listElem{k, v}]:
					aborted[listElem{k, v}] = true
					out = append(out, Anomaly{"G1a", k, fmt.Sprintf(
						"aborted read: %q is read, and its append failed (it certainly did not apply)", v),
						[]Op{ops[w], *o}})
				}
			}
			if _, seen := bestN[k]; !seen || n > bestN[k] {
				bestN[k] = n
				best[k] = readList(o, ki)
			}
		}
	}
	order := map[string][]Elem{}
	for k, l := range best {
		seen := map[Elem]bool{}
		for _, v := range l {
			if confirmed(k, v) && !seen[v] {
				seen[v] = true
				order[k] = append(order[k], v)
			}
		}
	}

	// The nodes: confirmed appends and reads that answered.
	g := depGraph{ops: ops}
	node := map[int]int{}
	for _, i := range comp {
		o := &ops[i]
		if o.Outcome == "ok" {
			node[i] = len(g.nodes)
			g.nodes = append(g.nodes, i)
		}
	}
	g.adj = make([][]edge, len(g.nodes))
	add := func(from, to int, e edge) {
		a, b := node[from], node[to]
		if a != b {
			e.to = b
			g.adj[a] = append(g.adj[a], e)
		}
	}
	keys := make([]string, 0, len(order))
	for k := range order {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		l := order[k]
		for j := 1; j < len(l); j++ {
			add(writer[k][l[j-1]], writer[k][l[j]], edge{kind: ww, key: k, elem: l[j], prev: l[j-1]})
		}
	}
	for _, i := range comp {
		o := &ops[i]
		if isListWrite(o) || o.Outcome != "ok" {
			continue
		}
		for ki, k := range opKeys(o) {
			l := order[k]
			n, prefix := 0, true
			for _, v := range readList(o, ki) {
				if n < len(l) && v == l[n] {
					n++
				} else if confirmed(k, v) {
					prefix = false // reported by checkLists (divergent or duplicated)
					break
				}
			}
			if !prefix {
				continue
			}
			if n > 0 {
				add(writer[k][l[n-1]], i, edge{kind: wr, key: k, elem: l[n-1]})
			}
			if n < len(l) {
				add(i, writer[k][l[n]], edge{kind: rw, key: k, elem: l[n]})
			}
		}
	}
	g.realTime()

	for _, scc := range g.sccs(rt | ww | wr | rw) {
		out = append(out, g.report(scc))
	}
	return out
}

// realTime draws an rt edge from each node to every node invoked after it completed, less those
// implied by others: at each invocation, the edges come from the frontier (the completed nodes
// with no rt successor completed yet, at most one per concurrent client), and a node's
// completion takes its predecessors off the frontier.
func (g *depGraph) realTime() {
	type event struct {
		at     int64
		invoke bool
		n      int
	}
	ev := make([]event, 0, 2*len(g.nodes))
	for n, i := range g.nodes {
		ev = append(ev, event{g.ops[i].Invoke, true, n}, event{g.ops[i].Complete, false, n})
	}
	// Invocations first at equal times: an rt edge needs a completion strictly before.
	sort.Slice(ev, func(a, b int) bool {
		if ev[a].at != ev[b].at {
			return ev[a].at < ev[b].at
		}
		return ev[a].invoke && !ev[b].invoke
	})
	frontier := map[int]bool{}
	pred := make([][]int, len(g.nodes))
	for _, e := range ev {
		if e.invoke {
			for f := range frontier {
				pred[e.n] = append(pred[e.n], f)
			}
			sort.Ints(pred[e.n])
			continue
		}
		for _, p := range pred[e.n] {
			delete(frontier, p)
			g.adj[p] = append(g.adj[p], edge{to: e.n, kind: rt})
		}
		pred[e.n] = nil
		frontier[e.n] = true
	}
}

// sccs are the strongly connected components of more than one node, over edges of the given
// kinds, among the nodes in (all nodes if in is nil). Tarjan's algorithm, iterative.
func (g *depGraph) sccs(kinds uint8) [][]int { return g.sccsWithin(kinds, nil) }

func (g *depGraph) sccsWithin(kinds uint8, in map[int]bool) [][]int {
	n := len(g.adj)
	index := make([]int, n)
	low := make([]int, n)
	onStack := make([]bool, n)
	for i := range index {
		index[i] = -1
	}
	var stack []int
	var out [][]int
	next := 0
	type frame struct{ v, e int }
	ok := func(v int, e edge) bool { return e.kind&kinds != 0 && (in == nil || in[e.to]) }
	for root := 0; root < n; root++ {
		if index[root] >= 0 || (in != nil && !in[root]) {
			continue
		}
		call := []frame{{root, 0}}
		index[root], low[root] = next, next
		next++
		stack = append(stack, root)
		onStack[root] = true
		for len(call) > 0 {
			f := &call[len(call)-1]
			v := f.v
			if f.e < len(g.adj[v]) {
				e := g.adj[v][f.e]
				f.e++
				if !ok(v, e) {
					continue
				}
				w := e.to
				if index[w] < 0 {
					index[w], low[w] = next, next
					next++
					stack = append(stack, w)
					onStack[w] = true
					call = append(call, frame{w, 0})
				} else if onStack[w] && index[w] < low[v] {
					low[v] = index[w]
				}
				continue
			}
			call = call[:len(call)-1]
			if len(call) > 0 {
				if u := call[len(call)-1].v; low[v] < low[u] {
					low[u] = low[v]
				}
			}
			if low[v] == index[v] {
				var c []int
				for {
					w := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					onStack[w] = false
					c = append(c, w)
					if w == v {
						break
					}
				}
				if len(c) > 1 {
					sort.Ints(c)
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// path is a shortest path from a to b over edges of the given kinds among the nodes in (BFS),
// as the edges taken (with their sources), or nil.
type step struct {
	from int
	e    edge
}

func (g *depGraph) path(a, b int, kinds uint8, in map[int]bool) []step {
	prev := map[int]step{a: {from: -1}}
	queue := []int{a}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, e := range g.adj[v] {
			if e.kind&kinds == 0 || !in[e.to] {
				continue
			}
			if _, seen := prev[e.to]; seen {
				continue
			}
			prev[e.to] = step{v, e}
			if e.to == b {
				var p []step
				for w := b; w != a; w = prev[w].from {
					p = append(p, prev[w])
				}
				for i, j := 0, len(p)-1; i < j; i, j = i+1, j-1 {
					p[i], p[j] = p[j], p[i]
				}
				return p
			}
			queue = append(queue, e.to)
		}
	}
	return nil
}

// cycle is a shortest cycle among the nodes in, over edges of the given kinds (any, if the
// nodes hold one), or nil.
func (g *depGraph) cycle(kinds uint8, in map[int]bool) []step {
	var best []step
	for _, c := range g.sccsWithin(kinds, in) {
		sub := map[int]bool{}
		for _, v := range c {
			sub[v] = true
		}
		// A cycle through the first node (a shortest one through it, not necessarily the
		// shortest of the component: enough to show the anomaly, and linear).
		v := c[0]
		for _, e := range g.adj[v] {
			if e.kind&kinds == 0 || !sub[e.to] {
				continue
			}
			p := []step{{v, e}}
			if e.to != v {
				rest := g.path(e.to, v, kinds, sub)
				if rest == nil {
					continue
				}
				p = append(p, rest...)
			}
			if best == nil || len(p) < len(best) {
				best = p
			}
		}
	}
	return best
}

// oneRW is a cycle with exactly one rw edge among the nodes in, its other edges of the given
// kinds (tried from at most 500 rw edges, to stay linear on a large component), or nil.
func (g *depGraph) oneRW(kinds uint8, in map[int]bool) []step {
	tries := 0
	for v := range g.adj {
		if !in[v] {
			continue
		}
		for _, e := range g.adj[v] {
			if e.kind != rw || !in[e.to] {
				continue
			}
			if tries++; tries > 500 {
				return nil
			}
			if back := g.path(e.to, v, kinds, in); back != nil {
				return append([]step{{v, e}}, back...)
			}
		}
	}
	return nil
}

// report names a component's cycle as Elle would: the first of G0, G1c, G-single, G2 found,
// then the same with real-time edges.
func (g *depGraph) report(scc []int) Anomaly {
	in := map[int]bool{}
	for _, v := range scc {
		in[v] = true
	}
	var c []step
	for _, kinds := range []uint8{0, rt} {
		if c = g.cycle(ww|kinds, in); c != nil {
			break
		}
		if c = g.cycle(ww|wr|kinds, in); c != nil {
			break
		}
		if c = g.oneRW(ww|wr|kinds, in); c != nil {
			break
		}
		if c = g.cycle(ww|wr|rw|kinds, in); c != nil {
			break
		}
	}
	var rws, wrs, rts int
	keySet := map[string]bool{}
	for _, s := range c {
		switch s.e.kind {
		case rw:
			rws++
		case wr:
			wrs++
		case rt:
			rts++
		}
		if s.e.key != "" {
			keySet[s.e.key] = true
		}
	}
	name := "G0"
	switch {
	case rws > 1:
		name = "G2"
	case rws == 1:
		name = "G-single"
	case wrs > 0:
		name = "G1c"
	}
	if rts > 0 {
		name += "-realtime"
	}
	keys := make([]string, 0, len(keySet))
	for k := range keySet {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	label := map[int]string{}
	var ops []Op
	for _, s := range c {
		label[s.from] = fmt.Sprintf("T%d", len(ops)+1)
		ops = append(ops, g.ops[g.nodes[s.from]])
	}
	var why []string
	for _, s := range c {
		a, b := label[s.from], label[s.e.to]
		switch s.e.kind {
		case ww:
			why = append(why, fmt.Sprintf("%s -ww-> %s (%s appended %q right after %s's %q to %s)", a, b, b, s.e.elem, a, s.e.prev, s.e.key))
		case wr:
			why = append(why, fmt.Sprintf("%s -wr-> %s (%s read %s up to %s's %q)", a, b, b, s.e.key, a, s.e.elem))
		case rw:
			why = append(why, fmt.Sprintf("%s -rw-> %s (%s read %s without %s's %q, the next confirmed element)", a, b, a, s.e.key, b, s.e.elem))
		case rt:
			why = append(why, fmt.Sprintf("%s -rt-> %s (%s completed before %s began)", a, b, a, b))
		}
	}
	text := fmt.Sprintf("a dependency cycle of %d ops (in a strongly connected component of %d): %s",
		len(c), len(scc), strings.Join(why, "; "))
	return Anomaly{name, strings.Join(keys, ","), text, ops}
}

// isListOp tells the ops the list graphs are made of: appends and reads, single or transactional.
func isListOp(o *Op) bool {
	switch o.Kind {
	case "append", "read", "mappend", "mread":
		return true
	}
	return false
}
