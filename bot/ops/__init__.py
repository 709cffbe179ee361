"""Operating the bot: doctor, metrics, the embedded Redis and where Redis is."""
