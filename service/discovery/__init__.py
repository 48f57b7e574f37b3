"""Read-only documents for AI agents, crawlers and launch tooling.

content.toml / content.py   the operator's wording, loaded and checked at start
room.py                     RoomType, PricingTier, authority labels, room-schema.json
catalog.py                  the webhook catalog, event documents and the public API's description
vectors.py                  the published signature test vectors
partner_pages.py            the partner pages (service.partner_docs), served with the base URL filled in
surfaces.py                 where each document lives (one table for every document)
llms.py                     /llms.txt and /llms-full.txt
manifest.py                 /agent.json, /.well-known/agent.json, /api/v1, /room-schema.json
sitemaps.py                 /sitemap.xml, /agent-sitemap.xml, /robots.txt
schemas.py / openapi.py     response models and /api/v1/openapi.json
caching.py                  bytes, ETag and encoded headers computed once; 304 and HEAD
documents.py                everything rendered at start; sitemap.xml kept current
routes.py                   the blueprint
"""
