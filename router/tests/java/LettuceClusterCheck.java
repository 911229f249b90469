// Lettuce's cluster client (RedisClusterClient) against a Shoal router in --cluster-mode
// emulated: it reads the topology (CLUSTER NODES / SLOTS), finds one master owning every slot,
// and keys of every slot, multi-key commands over several slots (Lettuce splits them by slot)
// and a pipeline work. router/tests/cluster_mode.rs compiles and runs it:
//
//   java -cp <classes>:<lettuce jars>/* LettuceClusterCheck <router port>
//
// Prints "ok" and exits 0 when every check passed; any failed check throws (exit 1).

import io.lettuce.core.LettuceFutures;
import io.lettuce.core.RedisFuture;
import io.lettuce.core.RedisURI;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.cluster.api.StatefulRedisClusterConnection;
import io.lettuce.core.cluster.api.async.RedisAdvancedClusterAsyncCommands;
import io.lettuce.core.cluster.api.sync.RedisAdvancedClusterCommands;
import io.lettuce.core.cluster.models.partitions.Partitions;
import io.lettuce.core.cluster.models.partitions.RedisClusterNode;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

public class LettuceClusterCheck {
    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        RedisURI uri = RedisURI.builder().withHost("127.0.0.1").withPort(port).withTimeout(Duration.ofSeconds(10)).build();
        RedisClusterClient client = RedisClusterClient.create(uri);
        try (StatefulRedisClusterConnection<String, String> conn = client.connect()) {
            Partitions partitions = conn.getPartitions();
            check(partitions.size() == 1, "one node: " + partitions);
            RedisClusterNode node = partitions.getPartition(0);
            check(node.is(RedisClusterNode.NodeFlag.UPSTREAM) || node.is(RedisClusterNode.NodeFlag.MASTER), "a master: " + node);
            check(node.getSlots().size() == 16384, "every slot: " + node.getSlots().size());
            check(node.getUri().getPort() == port, "at the router: " + node.getUri());

            RedisAdvancedClusterCommands<String, String> sync = conn.sync();
            for (int i = 0; i < 300; i++) {
                sync.set("lettuce:key:" + i, Integer.toString(i));
            }
            for (int i = 0; i < 300; i++) {
                check(Integer.toString(i).equals(sync.get("lettuce:key:" + i)), "GET lettuce:key:" + i);
            }
            // Multi-key commands over keys of many slots: Lettuce splits them by slot.
            Map<String, String> pairs = new HashMap<>();
            List<String> keys = new ArrayList<>();
            for (int i = 0; i < 50; i++) {
                pairs.put("lettuce:m:" + i, "v" + i);
                keys.add("lettuce:m:" + i);
            }
            check("OK".equals(sync.mset(pairs)), "MSET");
            List<io.lettuce.core.KeyValue<String, String>> got = sync.mget(keys.toArray(new String[0]));
            for (int i = 0; i < 50; i++) {
                check(("v" + i).equals(got.get(i).getValue()), "MGET " + i);
            }
            check(sync.del(keys.toArray(new String[0])) == 50, "DEL of 50 keys over many slots");
            check(sync.clusterKeyslot("foo") == 12182, "CLUSTER KEYSLOT");
            check(sync.clusterInfo().contains("cluster_state:ok"), "CLUSTER INFO");

            // A pipeline (commands flushed together).
            RedisAdvancedClusterAsyncCommands<String, String> async = conn.async();
            conn.setAutoFlushCommands(false);
            List<RedisFuture<Long>> futures = new ArrayList<>();
            for (int i = 0; i < 100; i++) {
                futures.add(async.incr("lettuce:counter:" + i));
            }
            conn.flushCommands();
            check(LettuceFutures.awaitAll(10, TimeUnit.SECONDS, futures.toArray(new RedisFuture[0])), "pipeline done");
            for (RedisFuture<Long> f : futures) {
                check(f.get() == 1L, "INCR in the pipeline");
            }
            conn.setAutoFlushCommands(true);
        } finally {
            client.shutdown();
        }
        System.out.println("ok");
    }
}
