package main

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
)

// A register's state: its value, or absent (never written, the state every key starts in).
type regState struct {
	value  Elem
	exists bool
}

type regInput struct {
	set   bool
	value Elem
}

type regOutput struct {
	value  Elem
	exists bool
}

var registerModel = porcupine.Model{
	Init: func() interface{} { return regState{} },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		s, in := state.(regState), input.(regInput)
		if in.set {
			return true, regState{value: in.value, exists: true}
		}
		out := output.(regOutput)
		return out == regOutput(s), s
	},
	DescribeOperation: func(input, output interface{}) string {
		in := input.(regInput)
		if in.set {
			return fmt.Sprintf("set(%q)", in.value)
		}
		out := output.(regOutput)
		if !out.exists {
			return "get() -> nil"
		}
		return fmt.Sprintf("get() -> %q", out.value)
	},
}

// registerOps turns one key's ops into Porcupine's, under the guarantee Shoal states: a write
// confirmed by WAIT is linearizable and never lost; an unconfirmed one may never take effect, or
// take effect and be lost at a failover. So unconfirmed writes are "unknown" (may apply at any
// time after their call, or never), and a read that returned an unconfirmed write's value is left
// out of the linearizability check (it may be undone later: Shoal does not promise it stays);
// such reads are still checked for values never written (see checkRegisters). Failed reads had
// no effect and are dropped.
func registerOps(ops []Op) []porcupine.Operation {
	confirmed := map[Elem]bool{}
	for _, o := range ops {
		if o.Kind == "set" && o.Outcome == "ok" {
			confirmed[o.Value] = true
		}
	}
	var out []porcupine.Operation
	for _, o := range ops {
		switch {
		case o.Kind == "set":
			out = append(out, porcupine.Operation{
				ClientId: o.Process, Input: regInput{set: true, value: o.Value},
				Call: o.Invoke, Output: regOutput{}, Return: o.End(), Metadata: o,
			})
		case o.Outcome != "ok":
		case o.Read != nil && !confirmed[*o.Read]:
		default:
			var res regOutput
			if o.Read != nil {
				res = regOutput{value: *o.Read, exists: true}
			}
			out = append(out, porcupine.Operation{
				ClientId: o.Process, Input: regInput{}, Call: o.Invoke, Output: res, Return: o.Complete, Metadata: o,
			})
		}
	}
	return out
}

// checkRegisters checks each key's set/get history: reads return only values some write (of any
// outcome) wrote, and the confirmed writes and the reads of them are linearizable. A key whose
// check does not finish within timeout is reported as undecided (not as passing).
func checkRegisters(ops []Op, timeout time.Duration, maxOps int) (anomalies []Anomaly, undecided []string) {
	keys, groups := byKey(ops, "set", "get")
	for _, key := range keys {
		g := groups[key]
		written := map[Elem]bool{}
		for _, o := range g {
			if o.Kind == "set" {
				written[o.Value] = true
			}
		}
		for _, o := range g {
			if o.Kind == "get" && o.Outcome == "ok" && o.Read != nil && !written[*o.Read] {
				anomalies = append(anomalies, Anomaly{"phantom read", key, "a read returned a value no write wrote", []Op{o}})
			}
		}
		history := registerOps(g)
		// Porcupine's search grows with a key's history (11 GB for a few 100k-op keys of a long
		// run); a longer one is left undecided rather than risk the machine. The chaos clients
		// move to fresh register keys every 20 s, so their keys stay far below the bound.
		if len(history) > maxOps {
			undecided = append(undecided, key)
			continue
		}
		// The verbose check keeps every partial linearization (gigabytes on an hour's history),
		// so it runs only to explain a history the plain check found illegal.
		res := porcupine.CheckOperationsTimeout(registerModel, history, timeout)
		switch res {
		case porcupine.Illegal:
			_, info := porcupine.CheckOperationsVerbose(registerModel, history, timeout)
			anomalies = append(anomalies, Anomaly{"not linearizable", key,
				"no order of these ops fits a register (the longest legal prefix, then the op that cannot follow it)",
				witness(history, info)})
		case porcupine.Unknown:
			undecided = append(undecided, key)
		}
	}
	return anomalies, undecided
}

// witness is a short account of why a key's history is not linearizable: the longest partial
// linearization Porcupine found, followed by the ops it could not place, earliest first (the
// first of them is the op that cannot follow). Cut to 40 ops.
func witness(history []porcupine.Operation, info porcupine.LinearizationInfo) []Op {
	var longest []int
	for _, part := range info.PartialLinearizations() {
		for _, lin := range part {
			if len(lin) > len(longest) {
				longest = lin
			}
		}
	}
	placed := map[int]bool{}
	var out []Op
	for _, i := range longest {
		placed[i] = true
	}
	tail := longest
	if len(tail) > 20 {
		tail = tail[len(tail)-20:]
	}
	for _, i := range tail {
		out = append(out, history[i].Metadata.(Op))
	}
	for i, h := range history {
		if !placed[i] && len(out) < 40 {
			out = append(out, h.Metadata.(Op))
		}
	}
	return out
}
