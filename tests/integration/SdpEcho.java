import java.io.*;
import java.net.*;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.util.Arrays;

/**
 * An echo server and two clients (java.net.Socket and NIO SocketChannel) in one JVM, run by
 * test_sdp.py with OpenJDK's own SDP support (-Dcom.sun.sdp.conf): the JDK converts each socket with
 * socket(27, SOCK_STREAM, 0) and dup2, which only works where something provides SDP (the shim).
 */
public class SdpEcho {
  public static void main(String[] args) throws Exception {
    ServerSocket server = new ServerSocket();
    server.bind(new InetSocketAddress("127.0.0.1", 0));
    int port = server.getLocalPort();
    Thread t = new Thread(() -> {
      try {
        for (int i = 0; i < 2; i++) {
          try (Socket c = server.accept()) {
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
    byte[] data = new byte[65536];
    for (int i = 0; i < data.length; i++) data[i] = (byte) (i * 13 + 1);
    try (Socket s = new Socket()) {
      s.connect(new InetSocketAddress("127.0.0.1", port));
      OutputStream out = s.getOutputStream();
      out.write(data);
      s.shutdownOutput();
      byte[] got = s.getInputStream().readAllBytes();
      System.out.println((Arrays.equals(got, data) ? "ok" : "FAIL") + " socket echo " + got.length + " bytes");
    }
    try (SocketChannel ch = SocketChannel.open(new InetSocketAddress("127.0.0.1", port))) {
      ch.write(ByteBuffer.wrap(data));
      ch.shutdownOutput();
      ByteArrayOutputStream acc = new ByteArrayOutputStream();
      ByteBuffer b = ByteBuffer.allocate(8192);
      while (ch.read(b) > 0) { acc.write(b.array(), 0, b.position()); b.clear(); }
      byte[] got = acc.toByteArray();
      System.out.println((Arrays.equals(got, data) ? "ok" : "FAIL") + " channel echo " + got.length + " bytes");
    }
    t.join();
    server.close();
  }
}
