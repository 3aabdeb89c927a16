package dev.elfen.lucene;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.Reader;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The documents file written by {@code scripts/corpus.sh}: a header line {@code
 * id\tsource\ttitle\tbody}, then one document per line; backslash, tab, newline and carriage
 * return are escaped as {@code \\ \t \n \r}. Its manifest {@code corpus.json} beside it gives
 * the document count and the file's SHA-256.
 */
public final class Corpus {
  /** The header line's fields. */
  public static final String HEADER = "id\tsource\ttitle\tbody";

  /** One document. */
  public record Doc(String id, String source, String title, String body) {}

  /** What {@code corpus.json} says: document count and SHA-256 of the documents file. */
  public record Manifest(long docs, String sha256) {}

  private Corpus() {}

  /** Calls {@code sink} for each document of {@code file}; returns the count. */
  public static long forEach(Path file, Consumer<Doc> sink) throws IOException {
    if (!Files.isReadable(file)) {
      throw new IOException("corpus " + file + " is missing: run scripts/corpus.sh (or pass --corpus)");
    }
    try (BufferedReader r = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
      return forEach(r, file.toString(), sink);
    }
  }

  /** Calls {@code sink} for each document read from {@code reader}; returns the count. */
  public static long forEach(Reader reader, String name, Consumer<Doc> sink) throws IOException {
    BufferedReader in = reader instanceof BufferedReader b ? b : new BufferedReader(reader);
    String header = in.readLine();
    if (header == null || !header.equals(HEADER)) {
      throw new IOException(name + ": not an elfen corpus (first line is not '" + HEADER.replace("\t", "\\t") + "')");
    }
    long n = 0;
    long lineNo = 1;
    for (String line; (line = in.readLine()) != null; ) {
      lineNo++;
      String[] f = line.split("\t", -1);
      if (f.length != 4) {
        throw new IOException(name + ":" + lineNo + ": expected 4 tab-separated fields, found " + f.length);
      }
      sink.accept(new Doc(unescape(f[0]), f[1], unescape(f[2]), unescape(f[3])));
      n++;
    }
    return n;
  }

  /** All documents of {@code file} in memory. */
  public static List<Doc> load(Path file) throws IOException {
    List<Doc> out = new ArrayList<>();
    forEach(file, out::add);
    return out;
  }

  /** Reverses the field escaping. */
  static String unescape(String s) {
    if (s.indexOf('\\') < 0) {
      return s;
    }
    StringBuilder sb = new StringBuilder(s.length());
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c == '\\' && i + 1 < s.length()) {
        char e = s.charAt(++i);
        sb.append(switch (e) {
          case 't' -> '\t';
          case 'n' -> '\n';
          case 'r' -> '\r';
          default -> e;
        });
      } else {
        sb.append(c);
      }
    }
    return sb.toString();
  }

  /** Escapes a field (the inverse of {@link #unescape}). */
  static String escape(String s) {
    return s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r");
  }

  /** Writes documents in the corpus format (for tests and tools). */
  public static void write(Path file, List<Doc> docs) throws IOException {
    StringBuilder sb = new StringBuilder(HEADER).append('\n');
    for (Doc d : docs) {
      sb.append(escape(d.id())).append('\t').append(d.source()).append('\t')
          .append(escape(d.title())).append('\t').append(escape(d.body())).append('\n');
    }
    Files.writeString(file, sb, StandardCharsets.UTF_8);
  }

  private static final Pattern DOCS = Pattern.compile("\"docs\"\\s*:\\s*(\\d+)");
  private static final Pattern SHA = Pattern.compile("\"sha256\"\\s*:\\s*\"([0-9a-f]{64})\"");

  /** The manifest {@code corpus.json} beside {@code docsFile}, or null when there is none. */
  public static Manifest manifest(Path docsFile) {
    Path m = docsFile.resolveSibling("corpus.json");
    if (!Files.isReadable(m)) {
      return null;
    }
    try {
      String s = Files.readString(m);
      Matcher d = DOCS.matcher(s);
      Matcher h = SHA.matcher(s);
      if (d.find() && h.find()) {
        return new Manifest(Long.parseLong(d.group(1)), h.group(1));
      }
      return null;
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
