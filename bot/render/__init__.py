"""What a reply looks like: Block Kit, the charts, mrkdwn escaping; plain text comes from runner/text/."""
