package dev.elfen.lucene;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/** The LC wire protocol v1 ({@code docs/lc-protocol.md}): frame sizes, kinds, statuses, codecs. */
public final class Protocol {
  /** Bytes of a request header (id, arg, len, kind). */
  public static final int REQUEST_HEADER_BYTES = 24;
  /** Bytes of a response. */
  public static final int RESPONSE_BYTES = 32;
  /** Largest payload a request may carry. */
  public static final int MAX_PAYLOAD_BYTES = 65536;
  /** Request kind: work. */
  public static final int KIND_WORK = 0;
  /** Request kind: readiness ping. */
  public static final int KIND_PING = 1;
  /** Response status: ok. */
  public static final int STATUS_OK = 0;
  /** Response status: bad request. */
  public static final int STATUS_BAD_REQUEST = 1;
  /** Response status: service error. */
  public static final int STATUS_SERVICE_ERROR = 2;

  private Protocol() {}

  /** A decoded request header. */
  public record Header(long id, long arg, long len, int kind) {}

  /** Decodes a 24-byte request header (len as unsigned). */
  public static Header decodeHeader(byte[] b) {
    ByteBuffer bb = ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN);
    return new Header(bb.getLong(0), bb.getLong(8), Integer.toUnsignedLong(bb.getInt(16)), bb.getInt(20));
  }

  /** Encodes a request (header + payload). */
  public static byte[] encodeRequest(long id, long arg, int kind, byte[] payload) {
    ByteBuffer bb = ByteBuffer.allocate(REQUEST_HEADER_BYTES + payload.length).order(ByteOrder.LITTLE_ENDIAN);
    bb.putLong(id).putLong(arg).putInt(payload.length).putInt(kind).put(payload);
    return bb.array();
  }

  /** Encodes a response into {@code out} (32 bytes). */
  public static void encodeResponse(byte[] out, long id, long serviceNs, long queuedNs, int status, int result) {
    ByteBuffer bb = ByteBuffer.wrap(out).order(ByteOrder.LITTLE_ENDIAN);
    bb.putLong(0, id).putLong(8, serviceNs).putLong(16, queuedNs).putInt(24, status).putInt(28, result);
  }

  /** A decoded response. */
  public record Response(long id, long serviceNs, long queuedNs, int status, int result) {}

  /** Decodes a 32-byte response. */
  public static Response decodeResponse(byte[] b) {
    ByteBuffer bb = ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN);
    return new Response(bb.getLong(0), bb.getLong(8), bb.getLong(16), bb.getInt(24), bb.getInt(28));
  }
}
