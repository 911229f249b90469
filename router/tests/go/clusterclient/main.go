// go-redis's cluster client (redis.ClusterClient) against a Shoal router in --cluster-mode
// emulated, RESP2 and RESP3: it reads the topology (CLUSTER SLOTS), finds one master owning
// every slot at the router, and keys of every slot, multi-key commands on one slot, a pipeline
// over keys of many slots (go-redis splits it by node), a transaction on one slot and the
// per-master helpers work. router/tests/cluster_mode.rs runs it (built by .ci/tools/install
// goredis):
//
//	shoal-goredis-cluster <router port>
//
// Prints "ok" and exits 0 when every check passed; the first failed check exits 1 with what
// differed.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "go-redis cluster check failed: "+format+"\n", args...)
	os.Exit(1)
}

func must[T any](v T, err error) T {
	if err != nil {
		fail("%v", err)
	}
	return v
}

func check(protocol int, port int) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	rc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:       []string{addr},
		Protocol:    protocol,
		DialTimeout: 5 * time.Second,
		ReadTimeout: 10 * time.Second,
		MaxRetries:  0, // a MOVED/TRYAGAIN retry would hide a wrong topology
	})
	defer rc.Close()
	p := fmt.Sprintf("go%d", protocol)

	// The topology: one master of every slot, at the address the client reached.
	slots := must(rc.ClusterSlots(ctx).Result())
	if len(slots) != 1 || slots[0].Start != 0 || slots[0].End != 16383 || len(slots[0].Nodes) != 1 {
		fail("CLUSTER SLOTS: %+v", slots)
	}
	if slots[0].Nodes[0].Addr != addr {
		fail("the only node is at %s, not at the router %s", slots[0].Nodes[0].Addr, addr)
	}
	masters := 0
	if err := rc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		masters++
		return c.Ping(ctx).Err()
	}); err != nil {
		fail("ForEachMaster: %v", err)
	}
	if masters != 1 {
		fail("%d masters, want 1", masters)
	}
	if info := must(rc.ClusterInfo(ctx).Result()); !contains(info, "cluster_state:ok") {
		fail("CLUSTER INFO: %q", info)
	}
	if slot := must(rc.ClusterKeySlot(ctx, "foo").Result()); slot != 12182 {
		fail("CLUSTER KEYSLOT foo = %d", slot)
	}

	// Keys of many slots, one at a time.
	for i := 0; i < 300; i++ {
		must(rc.Set(ctx, p+":key:"+strconv.Itoa(i), i, 0).Result())
	}
	for i := 0; i < 300; i++ {
		if v := must(rc.Get(ctx, p+":key:"+strconv.Itoa(i)).Result()); v != strconv.Itoa(i) {
			fail("GET %s:key:%d = %q", p, i, v)
		}
	}
	// A pipeline over keys of many slots: go-redis groups it by node.
	pipe := rc.Pipeline()
	incrs := make([]*redis.IntCmd, 100)
	for i := range incrs {
		incrs[i] = pipe.Incr(ctx, p+":counter:"+strconv.Itoa(i))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		fail("pipeline: %v", err)
	}
	for i, c := range incrs {
		if c.Val() != 1 {
			fail("INCR %d in the pipeline = %d", i, c.Val())
		}
	}
	// Multi-key commands and a transaction on one slot (a hashtag), as cluster clients demand.
	tag := "{" + p + "}"
	must(rc.MSet(ctx, tag+":a", "1", tag+":b", "2").Result())
	if got := must(rc.MGet(ctx, tag+":a", tag+":b", tag+":none").Result()); got[0] != "1" || got[1] != "2" || got[2] != nil {
		fail("MGET = %v", got)
	}
	var incr *redis.IntCmd
	if _, err := rc.TxPipelined(ctx, func(tx redis.Pipeliner) error {
		tx.Set(ctx, tag+":n", 10, 0)
		incr = tx.IncrBy(ctx, tag+":n", 5)
		return nil
	}); err != nil {
		fail("MULTI/EXEC: %v", err)
	}
	if incr.Val() != 15 {
		fail("INCRBY in MULTI = %d", incr.Val())
	}
	// WATCH on a key, changed by nobody: the transaction commits.
	if err := rc.Watch(ctx, func(tx *redis.Tx) error {
		n := must(tx.Get(ctx, tag+":n").Int())
		_, err := tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.Set(ctx, tag+":n", n*2, 0)
			return nil
		})
		return err
	}, tag+":n"); err != nil {
		fail("WATCH: %v", err)
	}
	if n := must(rc.Get(ctx, tag+":n").Int()); n != 30 {
		fail("after WATCH/MULTI n = %d", n)
	}
	// Other types.
	must(rc.RPush(ctx, p+":list", "a", "b", "c").Result())
	if l := must(rc.LRange(ctx, p+":list", 0, -1).Result()); fmt.Sprint(l) != "[a b c]" {
		fail("LRANGE = %v", l)
	}
	must(rc.HSet(ctx, p+":hash", "f", "v").Result())
	if h := must(rc.HGetAll(ctx, p+":hash").Result()); len(h) != 1 || h["f"] != "v" {
		fail("HGETALL = %v", h)
	}
	// The keyspace as a cluster client sees it.
	slot := must(rc.ClusterKeySlot(ctx, p+":key:7").Result())
	if n := must(rc.ClusterCountKeysInSlot(ctx, int(slot)).Result()); n < 1 {
		fail("COUNTKEYSINSLOT %d = %d", slot, n)
	}
	inSlot := must(rc.ClusterGetKeysInSlot(ctx, int(slot), 1000).Result())
	if !containsKey(inSlot, p+":key:7") {
		fail("GETKEYSINSLOT %d = %v", slot, inSlot)
	}
	// DEL over keys of several slots, one command per key (as go-redis requires).
	deleted := int64(0)
	for i := 0; i < 10; i++ {
		deleted += must(rc.Del(ctx, p+":key:"+strconv.Itoa(i)).Result())
	}
	if deleted != 10 {
		fail("deleted %d keys, want 10", deleted)
	}
	// Every key written is counted once by DBSIZE over the masters.
	size := must(rc.DBSize(ctx).Result())
	if size < 290 {
		fail("DBSIZE = %d", size)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func containsKey(keys []string, key string) bool {
	for _, k := range keys {
		if k == key {
			return true
		}
	}
	return false
}

func main() {
	if len(os.Args) != 2 {
		fail("usage: shoal-goredis-cluster PORT")
	}
	port, err := strconv.Atoi(os.Args[1])
	if err != nil {
		fail("port: %v", err)
	}
	for _, protocol := range []int{2, 3} {
		check(protocol, port)
	}
	fmt.Println("ok")
}
