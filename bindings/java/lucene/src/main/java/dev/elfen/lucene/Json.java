package dev.elfen.lucene;

import java.util.List;
import java.util.Map;

/** A tiny JSON writer: maps, lists, strings, numbers, booleans, null. */
public final class Json {
  private Json() {}

  /** The JSON text of {@code v} (maps keep their iteration order), indented. */
  public static String write(Object v) {
    StringBuilder sb = new StringBuilder();
    write(sb, v, 0);
    return sb.append('\n').toString();
  }

  private static void write(StringBuilder sb, Object v, int depth) {
    if (v == null) {
      sb.append("null");
    } else if (v instanceof String s) {
      quote(sb, s);
    } else if (v instanceof Double d) {
      sb.append(d.isNaN() || d.isInfinite() ? "null" : Double.toString(d));
    } else if (v instanceof Float f) {
      write(sb, f.doubleValue(), depth);
    } else if (v instanceof Number || v instanceof Boolean) {
      sb.append(v);
    } else if (v instanceof Map<?, ?> m) {
      sb.append('{');
      boolean first = true;
      for (Map.Entry<?, ?> e : m.entrySet()) {
        sb.append(first ? "\n" : ",\n").append("  ".repeat(depth + 1));
        first = false;
        quote(sb, String.valueOf(e.getKey()));
        sb.append(": ");
        write(sb, e.getValue(), depth + 1);
      }
      sb.append(first ? "}" : "\n" + "  ".repeat(depth) + "}");
    } else if (v instanceof List<?> l) {
      boolean flat = l.stream().allMatch(x -> x instanceof Number || x instanceof String || x == null);
      sb.append('[');
      for (int i = 0; i < l.size(); i++) {
        if (flat) {
          sb.append(i == 0 ? "" : ", ");
        } else {
          sb.append(i == 0 ? "\n" : ",\n").append("  ".repeat(depth + 1));
        }
        write(sb, l.get(i), depth + 1);
      }
      sb.append(flat || l.isEmpty() ? "]" : "\n" + "  ".repeat(depth) + "]");
    } else {
      quote(sb, v.toString());
    }
  }

  private static void quote(StringBuilder sb, String s) {
    sb.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"' -> sb.append("\\\"");
        case '\\' -> sb.append("\\\\");
        case '\n' -> sb.append("\\n");
        case '\r' -> sb.append("\\r");
        case '\t' -> sb.append("\\t");
        default -> {
          if (c < 0x20) {
            sb.append(String.format("\\u%04x", (int) c));
          } else {
            sb.append(c);
          }
        }
      }
    }
    sb.append('"');
  }
}
