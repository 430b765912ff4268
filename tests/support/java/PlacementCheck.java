import java.nio.ByteBuffer;
import java.util.HexFormat;
import org.apache.beam.runners.flink.adapter.FlinkKey;
import org.apache.flink.runtime.state.KeyGroupRangeAssignment;

/**
 * The subtask Flink runs a Beam key on, by Beam's and Flink's own classes:
 * args are the parallelism and the keys' nested encodings in hex; prints
 * one subtask a line. Run with Beam's Flink job server's lib/ on the class
 * path (tests/runners/test_placement.py).
 */
public class PlacementCheck {
  public static void main(String[] args) {
    int parallelism = Integer.parseInt(args[0]);
    int maxParallelism = KeyGroupRangeAssignment.computeDefaultMaxParallelism(parallelism);
    for (int i = 1; i < args.length; i++) {
      FlinkKey key = FlinkKey.of(ByteBuffer.wrap(HexFormat.of().parseHex(args[i])));
      System.out.println(KeyGroupRangeAssignment.assignKeyToParallelOperator(key, maxParallelism, parallelism));
    }
  }
}
