import java.io.*;
import java.net.*;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.util.Arrays;

/**
 * An echo server and two clients (java.net.Socket and NIO SocketChannel), run with OpenJDK's own
 * SDP support (-Dcom.sun.sdp.conf): the JDK converts each socket with socket(27, SOCK_STREAM, 0)
 * and dup2, which only works where something provides SDP (the shim).
 *   (no arguments)          both in one JVM on 127.0.0.1 (test_sdp.py)
 *   server ADDR PORT        the server alone, for two connections (tests/vm/sdp_verbs.sh)
 *   client ADDR PORT        the two clients alone
 */
public class SdpEcho {
  public static void main(String[] args) throws Exception {
    String mode = args.length > 0 ? args[0] : "both";
    String addr = args.length > 1 ? args[1] : "127.0.0.1";
    int port = args.length > 2 ? Integer.parseInt(args[2]) : 0;
    Thread t = null;
    ServerSocket server = null;
    if (!mode.equals("client")) {
      server = new ServerSocket();
      server.bind(new InetSocketAddress(addr, port));
      port = server.getLocalPort();
      t = serve(server);
      if (mode.equals("server")) {
        System.out.println("ready");
        t.join();
        server.close();
        return;
      }
    }
    byte[] data = new byte[65536];
    for (int i = 0; i < data.length; i++) data[i] = (byte) (i * 13 + 1);
    try (Socket s = new Socket()) {
      s.connect(new InetSocketAddress(addr, port));
      OutputStream out = s.getOutputStream();
      out.write(data);
      s.shutdownOutput();
      byte[] got = s.getInputStream().readAllBytes();
      System.out.println((Arrays.equals(got, data) ? "ok" : "FAIL") + " socket echo " + got.length
          + " bytes, peer " + s.getRemoteSocketAddress());
    }
    try (SocketChannel ch = SocketChannel.open(new InetSocketAddress(addr, port))) {
      ch.write(ByteBuffer.wrap(data));
      ch.shutdownOutput();
      ByteArrayOutputStream acc = new ByteArrayOutputStream();
      ByteBuffer b = ByteBuffer.allocate(8192);
      while (ch.read(b) > 0) { acc.write(b.array(), 0, b.position()); b.clear(); }
      byte[] got = acc.toByteArray();
      System.out.println((Arrays.equals(got, data) ? "ok" : "FAIL") + " channel echo " + got.length
          + " bytes, peer " + ch.getRemoteAddress());
    }
    if (t != null) {
      t.join();
      server.close();
    }
  }

  // Echoes two connections, one after the other.
  static Thread serve(ServerSocket server) {
    Thread t = new Thread(() -> {
      try {
        for (int i = 0; i < 2; i++) {
          try (Socket c = server.accept()) {
            System.out.println("accepted " + c.getRemoteSocketAddress() + " at " + c.getLocalSocketAddress());
            InputStream in = c.getInputStream();
            OutputStream out = c.getOutputStream();
            byte[] buf = new byte[8192];
            int n;
            while ((n = in.read(buf)) > 0) out.write(buf, 0, n);
          }
        }
      } catch (IOException e) {
        System.out.println("FAIL server: " + e);
      }
    });
    t.start();
    return t;
  }
}
