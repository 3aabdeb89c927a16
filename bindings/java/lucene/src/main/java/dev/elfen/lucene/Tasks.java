package dev.elfen.lucene;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * The term queries of a luceneutil tasks file: lines {@code HighTerm: ref # freq=3793973},
 * {@code MedTerm: ...}, {@code LowTerm: ...}. The text after {@code #} is the term's frequency
 * in luceneutil's 10M-document Wikipedia index, not part of the query.
 *
 * <p>Other task kinds (phrases, fuzzy, facets, ...) are skipped and counted as {@link
 * #otherLines()}. A term line that cannot be parsed (no term, more than one word, a bad
 * frequency) is counted in {@link #badLines()} with a few examples, never fatal.
 */
public final class Tasks {
  /** The task kinds that are term queries, in the order the paper lists them. */
  public static final List<String> TERM_KINDS = List.of("HighTerm", "MedTerm", "LowTerm");

  /** One term query: its position in {@link #queries()}, its line, kind, term and frequency (-1 if none). */
  public record Query(int index, int line, String kind, String term, long freq) {}

  private final List<Query> queries;
  private final int badLines;
  private final int otherLines;
  private final List<String> badExamples;

  private Tasks(List<Query> queries, int badLines, int otherLines, List<String> badExamples) {
    this.queries = Collections.unmodifiableList(queries);
    this.badLines = badLines;
    this.otherLines = otherLines;
    this.badExamples = Collections.unmodifiableList(badExamples);
  }

  /** Reads and parses a tasks file. */
  public static Tasks load(Path file) throws IOException {
    try (Reader r = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
      return parse(r);
    }
  }

  /** Parses a tasks file's text. */
  public static Tasks parse(Reader reader) throws IOException {
    BufferedReader in = reader instanceof BufferedReader b ? b : new BufferedReader(reader);
    List<Query> out = new ArrayList<>();
    List<String> examples = new ArrayList<>();
    int bad = 0;
    int other = 0;
    int lineNo = 0;
    for (String line; (line = in.readLine()) != null; ) {
      lineNo++;
      String t = line.strip();
      if (t.isEmpty()) {
        continue;
      }
      int colon = t.indexOf(':');
      String kind = colon > 0 ? t.substring(0, colon).strip() : "";
      if (!TERM_KINDS.contains(kind)) {
        other++;
        continue;
      }
      String rest = t.substring(colon + 1);
      String query = rest;
      long freq = -1;
      int hash = rest.indexOf('#');
      String problem = null;
      if (hash >= 0) {
        query = rest.substring(0, hash);
        String comment = rest.substring(hash + 1).strip();
        if (comment.startsWith("freq=")) {
          try {
            freq = Long.parseLong(comment.substring(5).strip());
          } catch (NumberFormatException e) {
            problem = "bad frequency";
          }
        }
      }
      query = query.strip();
      if (query.isEmpty()) {
        problem = "no term";
      } else if (query.chars().anyMatch(Character::isWhitespace)) {
        problem = "more than one word";
      }
      if (problem != null) {
        bad++;
        if (examples.size() < 5) {
          examples.add("line " + lineNo + ": " + problem + ": " + t);
        }
        continue;
      }
      out.add(new Query(out.size(), lineNo, kind, query, freq));
    }
    return new Tasks(out, bad, other, examples);
  }

  /** The term queries in file order; {@code queries().get(i).index() == i}. */
  public List<Query> queries() {
    return queries;
  }

  /** Term-query lines that could not be parsed. */
  public int badLines() {
    return badLines;
  }

  /** Lines of other task kinds (skipped). */
  public int otherLines() {
    return otherLines;
  }

  /** Up to five unparseable lines with the reason. */
  public List<String> badExamples() {
    return badExamples;
  }

  /** Number of queries per kind, in {@link #TERM_KINDS} order, e.g. {@code HighTerm=237 MedTerm=500}. */
  public String summary() {
    StringBuilder sb = new StringBuilder();
    for (String k : TERM_KINDS) {
      long n = queries.stream().filter(q -> q.kind().equals(k)).count();
      sb.append(sb.isEmpty() ? "" : " ").append(k).append('=').append(n);
    }
    return sb + " bad=" + badLines + " other=" + otherLines;
  }

  /**
   * The term of a request payload: {@code term} or {@code body:term} (surrounding whitespace
   * ignored); null when it is empty or has more than one word.
   */
  public static String termOfPayload(String payload) {
    String t = payload.strip();
    if (t.startsWith(LuceneIndex.BODY + ":")) {
      t = t.substring(LuceneIndex.BODY.length() + 1).strip();
    }
    if (t.isEmpty() || t.chars().anyMatch(Character::isWhitespace)) {
      return null;
    }
    return t;
  }
}
