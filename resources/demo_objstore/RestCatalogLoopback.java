/*
 * deltaport: Apache Iceberg's REST catalog test server (iceberg-open-api, classifier
 * test-fixtures), bound to one address.
 *
 * Why not RESTCatalogServer.main: it listens on every interface (`new Server(port)`), and
 * deltaport's test servers listen on loopback only. This class does what its start() does with
 * the same parts (the backend catalog from CATALOG_* variables, RESTServerCatalogAdapter,
 * RESTCatalogServlet) and a connector bound to REST_HOST:REST_PORT. It sits in the fixture's
 * package because those parts are package-private. Without gzip: loopback needs none.
 *
 * Environment: REST_HOST, REST_PORT, and CATALOG_* as RESTCatalogServer reads them
 * (CATALOG_URI=jdbc:sqlite:file, CATALOG_WAREHOUSE=s3://bucket/prefix,
 * CATALOG_IO__IMPL=org.apache.iceberg.aws.s3.S3FileIO, CATALOG_S3_ENDPOINT, ...).
 * It prints one line "deltaport-rest-catalog listening on HOST:PORT" once it serves.
 */
package org.apache.iceberg.rest;

import java.util.Map;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.apache.iceberg.relocated.com.google.common.collect.Maps;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

public final class RestCatalogLoopback {
  private RestCatalogLoopback() {}

  public static void main(String[] args) throws Exception {
    String host = System.getenv().getOrDefault("REST_HOST", "127.0.0.1");
    int port = Integer.parseInt(System.getenv().getOrDefault("REST_PORT", "8181"));

    Map<String, String> props = Maps.newHashMap(RCKUtils.environmentCatalogConfig());
    props.putIfAbsent(CatalogProperties.CATALOG_IMPL, JdbcCatalog.class.getName());
    props.putIfAbsent("jdbc.schema-version", "V1");
    if (!props.containsKey(CatalogProperties.URI) || !props.containsKey(CatalogProperties.WAREHOUSE_LOCATION)) {
      // A catalog in memory or in a temporary folder would be lost on a restart: refuse.
      throw new IllegalArgumentException("CATALOG_URI and CATALOG_WAREHOUSE are required");
    }
    // No Hadoop configuration: the backend's FileIO is S3FileIO (or any FileIO without Hadoop).
    Catalog catalog = CatalogUtil.buildIcebergCatalog("rest_backend", props, null);

    RESTCatalogServer.CatalogContext context = new RESTCatalogServer.CatalogContext(catalog, props);
    RESTCatalogServlet servlet = new RESTCatalogServlet(new RESTServerCatalogAdapter(context));
    ServletContextHandler handler = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    handler.addServlet(new ServletHolder(servlet), "/*");

    Server server = new Server();
    ServerConnector connector = new ServerConnector(server);
    connector.setHost(host);
    connector.setPort(port);
    server.addConnector(connector);
    server.setHandler(handler);
    server.start();
    System.out.println("deltaport-rest-catalog listening on " + host + ":" + connector.getLocalPort());
    System.out.flush();
    server.join();
  }
}
