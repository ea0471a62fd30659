"""trainer.tasks"""
