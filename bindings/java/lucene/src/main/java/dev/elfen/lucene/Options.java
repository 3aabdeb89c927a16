package dev.elfen.lucene;

import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Command-line options of the form {@code --name value} (or {@code --name=value}),
 * each with an environment variable as fallback, then a default.
 */
public final class Options {
  private final Map<String, String> values = new HashMap<>();
  private final Map<String, String> env;

  /** Parses {@code args}; {@code env} is consulted for options not given. */
  public Options(List<String> args, Map<String, String> env) {
    this.env = env;
    for (int i = 0; i < args.size(); i++) {
      String a = args.get(i);
      if (!a.startsWith("--")) {
        throw new IllegalArgumentException("unexpected argument '" + a + "' (options are --name value)");
      }
      String name = a.substring(2);
      String value;
      int eq = name.indexOf('=');
      if (eq >= 0) {
        value = name.substring(eq + 1);
        name = name.substring(0, eq);
      } else if (i + 1 < args.size() && !args.get(i + 1).startsWith("--")) {
        value = args.get(++i);
      } else {
        value = "true";
      }
      values.put(name, value);
    }
  }

  /**
   * The option's value, else the environment variable's (when {@code envName} is not null), else
   * null; an empty value counts as not given (a harness may substitute an empty string).
   */
  public String get(String name, String envName) {
    String v = values.get(name);
    if ((v == null || v.isEmpty()) && envName != null) {
      v = env.get(envName);
    }
    return v == null || v.isEmpty() ? null : v;
  }

  /** Like {@link #get} with a default. */
  public String get(String name, String envName, String def) {
    String v = get(name, envName);
    return v == null ? def : v;
  }

  /** An integer option. */
  public int getInt(String name, String envName, int def) {
    String v = get(name, envName);
    if (v == null) {
      return def;
    }
    try {
      return Integer.parseInt(v.trim());
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("--" + name + (envName == null ? "" : " / " + envName)
          + ": not an integer: '" + v + "'");
    }
  }

  /** A floating-point option. */
  public double getDouble(String name, String envName, double def) {
    String v = get(name, envName);
    if (v == null) {
      return def;
    }
    try {
      return Double.parseDouble(v.trim());
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("--" + name + ": not a number: '" + v + "'");
    }
  }

  /** A boolean flag ({@code --name}, {@code --name true|false}). */
  public boolean getFlag(String name, boolean def) {
    String v = values.get(name);
    return v == null ? def : Boolean.parseBoolean(v);
  }

  /** Whether the option was given on the command line. */
  public boolean has(String name) {
    return values.containsKey(name);
  }

  /** Where the corpus lives: {@code --corpus-dir}, {@code ELFEN_CORPUS_DIR}, {@code ~/.cache/elfen/corpus}. */
  public Path corpusDir() {
    String v = get("corpus-dir", "ELFEN_CORPUS_DIR");
    if (v != null) {
      return Path.of(v);
    }
    return Path.of(System.getProperty("user.home"), ".cache", "elfen", "corpus");
  }

  /** The documents file: {@code --corpus}, else {@code <corpus dir>/docs.tsv}. */
  public Path corpusFile() {
    String v = get("corpus", null);
    return v != null ? Path.of(v) : corpusDir().resolve("docs.tsv");
  }

  /** Copies of each corpus document in the index: {@code --copies}, {@code ELFEN_LUCENE_COPIES}, 1. */
  public int copies() {
    int c = getInt("copies", "ELFEN_LUCENE_COPIES", 1);
    if (c < 1) {
      throw new IllegalArgumentException("--copies / ELFEN_LUCENE_COPIES must be >= 1");
    }
    return c;
  }

  /**
   * The index: {@code --index}, {@code ELFEN_INDEX_DIR}, else {@code
   * <corpus dir>/index-lucene<major>} ({@code -x<copies>} appended when copies > 1).
   */
  public Path indexDir() {
    String v = get("index", "ELFEN_INDEX_DIR");
    if (v != null) {
      return Path.of(v);
    }
    int c = copies();
    return corpusDir().resolve("index-lucene" + org.apache.lucene.util.Version.LATEST.major + (c > 1 ? "-x" + c : ""));
  }

  /**
   * The query file: {@code --tasks}, else {@code wikimedium.10M.nostopwords.tasks} in
   * {@code --data-dir} / {@code ELFEN_DATA_DIR}, else the first of {@link DataDir#candidates()}
   * that has it.
   */
  public Path tasksFile() {
    String v = get("tasks", null);
    if (v != null) {
      return Path.of(v);
    }
    return DataDir.tasksFile(get("data-dir", "ELFEN_DATA_DIR"));
  }
}
