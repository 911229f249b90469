package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	timeout := flag.Duration("timeout", 60*time.Second, "Porcupine's time limit per key")
	limit := flag.Int("max-anomalies", 20, "print at most this many anomalies")
	maxOps := flag.Int("max-key-ops", 30000, "leave a register key with a longer history undecided (Porcupine's memory)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: shoal-checker [-timeout 60s] HISTORY.jsonl")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ops, err := ReadHistory(f)
	f.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	r := Check(ops, *timeout, *maxOps)
	fmt.Println(r.Summary)
	for i, a := range r.Anomalies {
		if i == *limit {
			fmt.Printf("... and %d more\n", len(r.Anomalies)-i)
			break
		}
		fmt.Println(a)
	}
	if len(r.Anomalies) > 0 || len(r.Undecided) > 0 {
		os.Exit(1)
	}
}

// Result is what Check found.
type Result struct {
	Anomalies []Anomaly
	// Keys whose register check did not finish in time: neither passed nor failed.
	Undecided []string
	Summary   string
}

// Check runs every check over a whole history.
func Check(ops []Op, timeout time.Duration, maxOps int) Result {
	count := map[string]int{}
	for _, o := range ops {
		count[o.Kind+"/"+o.Outcome]++
	}
	cycles := checkCycles(ops)
	ops, txn := expandTransactions(ops)
	reg, undecided := checkRegisters(ops, timeout, maxOps)
	lists := checkLists(ops)
	r := Result{Anomalies: append(append(append(txn, reg...), lists...), cycles...), Undecided: undecided}
	r.Summary = fmt.Sprintf("%d ops %v: %d anomalies, %d keys undecided %v",
		len(ops), count, len(r.Anomalies), len(undecided), undecided)
	return r
}
